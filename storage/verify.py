"""Offline check of the audit trail: unchanged since written, and accepted tokens never went back.

Reads `fencegate_audit` in id order (per resource, the ids of entries written
with a passed fence follow commit order: each is inserted after the fence
upsert that holds the resource's row lock) and checks:

1. the hash chain (`chain.py`): each entry's hash follows from the entry
   before it and its own fields; the first entry where it does not is where
   the trail was changed (an entry edited, removed, or inserted out of
   order), reported with the ids around it. The last entry must be the head
   row's, and every exported head given (`HASH@ID`) must be in the chain: a
   truncated tail shows against either;
2. per resource, the tokens of entries whose fence passed (`accepted`,
   `not_found`) never decrease (invariants 1 and 3);
3. a `stale_token` refusal carries a token below the mark it reports;
4. every resource's current mark in `fencegate_fences` is at least the
   highest token the trail accepted for it (the mark did not go back).

With archives (`archivefile.py`), their entries are checked first, in id
order, and the live trail's first entry must follow from the last archived
one; entries both in an archive and still in the database (an archive run
cut short before its deletion ended) must be equal, and are counted once.

After a break the chain check goes on from the stored hash, so every break
is listed, the first one first. It needs only the database, not a running
gateway, and says what it read. It reads one snapshot (PostgreSQL: REPEATABLE
READ; SQLite: a deferred read transaction, WAL), so a live gateway's appends
while it reads are neither seen as a truncated tail nor blocked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.archivefile import read_entries, read_info
from storage.chain import GENESIS_HEAD, HASHED, Head, entry_hash
from storage.engine import READ_ONLY
from storage.errors import MalformedRow, map_storage_errors
from storage.models import AuditEntry, AuditHead, Fence, SchemaVersion
from storage.records import FENCE_PASSED
from storage.rows import Decoder
from storage.schema import require_current
from storage.statements import HEAD_ROW

READ_BATCH = 10_000  # audit rows fetched per round trip


@dataclass
class AuditReport:
    """What `verify_audit` read and what it found wrong."""

    rows: int = 0
    first_id: int | None = None
    last_id: int | None = None
    outcomes: Counter[str] = field(default_factory=Counter)
    highest: dict[str, int] = field(default_factory=dict)  # per resource, the highest accepted token
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chain: Head = GENESIS_HEAD  # the last entry read, as the chain links it
    first_break: int | None = None  # the id of the first entry the chain does not lead to
    malformed: list[int] = field(default_factory=list)  # ids of entries holding values fencegate never writes
    stored_head: Head | None = None  # the head row
    archived: int = 0  # entries before the first one read (archived): its link is checked only against
    # an exported head of the entry just before it
    _hashes: dict[int, str] = field(default_factory=dict)  # the ids and hashes of exported heads asked for

    @property
    def ok(self) -> bool:
        return not self.violations

    def lines(self) -> list[str]:
        """The report as text, one fact per line."""
        span = f"ids {self.first_id}..{self.last_id}" if self.rows else "no entries"
        out = [
            f"read {self.rows} audit entries ({span}) over {len(self.highest)} fenced resources",
            *(f"  {outcome}: {count}" for outcome, count in sorted(self.outcomes.items())),
        ]
        if self.archived:
            out.append(f"the trail starts after entry {self.archived} (entries up to it archived)")
        out.append(f"chain head: {self.chain} (export it; later: audit verify --head {self.chain})")
        out.extend(self.notes)
        if self.first_break is not None:
            out.append(f"TAMPERED: the chain breaks first at entry {self.first_break}")
        if self.violations:
            out.append(f"VIOLATIONS: {len(self.violations)}")
            out.extend(f"  {violation}" for violation in self.violations[:50])
        else:
            out.append("ok: the chain holds, accepted tokens never went back, and no mark is below them")
        return out

    def as_dict(self) -> dict[str, object]:
        """The report for machines (`audit verify --json`): the same facts as `lines`, every violation."""
        return {
            "ok": self.ok,
            "entries": self.rows,
            "first_id": self.first_id,
            "last_id": self.last_id,
            "archived_before": self.archived or None,
            "resources": len(self.highest),
            "outcomes": dict(sorted(self.outcomes.items())),
            "head": str(self.chain),
            "first_break": self.first_break,
            "malformed": list(self.malformed),
            "violations": list(self.violations),
            "notes": list(self.notes),
        }

    def broken(self, row_id: int, why: str) -> None:
        """Record a break of the chain at entry `row_id`."""
        if self.first_break is None:
            self.first_break = row_id
        self.violations.append(f"entry {row_id}: {why}")


async def verify_audit(
    engine: AsyncEngine,
    *,
    heads: Sequence[Head] = (),
    progress: Callable[[int], None] | None = None,
    archives: Sequence[Path] = (),
) -> AuditReport:
    """Check the audit trail and the marks of the database behind `engine`, and any exported `heads`,
    after the entries of `archives` (`BadArchive` if one is not a whole archive).

    `progress` is called with the count of entries checked after each page read (a long trail takes
    minutes).
    """
    report = AuditReport(_hashes={head.last_id: "" for head in heads})
    try:
        await require_current(engine)
    except MalformedRow as exc:  # read as this version's tables: the rest says what else was edited
        report.violations.append(
            f"the schema version row ({SchemaVersion.__tablename__}) is malformed: {exc}"
        )
    anchors = {head.last_id: head for head in heads}  # an archived trail's first entry links to one
    dialect = engine.dialect
    entries = Decoder(AuditEntry, (*HASHED, "chain"), dialect)
    fences = Decoder(Fence, ("resource", "token"), dialect)
    head = Decoder(AuditHead, ("last_id", "hash"), dialect)
    # One snapshot for the entries, the marks and the head row: read apart, an append between them
    # showed as "entries were removed from the tail". SQLite's default BEGIN IMMEDIATE would also hold
    # the write lock for the whole read, stopping a live gateway's writes.
    snapshot = {READ_ONLY: True} if dialect.name == "sqlite" else {"isolation_level": "REPEATABLE READ"}
    with map_storage_errors("audit verification"):
        async with engine.execution_options(**snapshot).connect() as conn:
            live_first = (await conn.execute(select(func.min(AuditEntry.id)))).scalar()
            overlap = _archived(report, archives, anchors, live_first)
            after: int | None = None  # the first page has no lower bound: an id below 1 is malformed too
            while True:
                query = select(*entries.stored).order_by(AuditEntry.id).limit(READ_BATCH)
                page = (
                    await conn.execute(query if after is None else query.where(AuditEntry.id > after))
                ).all()
                if not page:
                    break
                for raw in page:
                    if raw.id in overlap:  # archived too: one entry, counted once if equal
                        if entries.get(raw._mapping, "chain") != overlap[raw.id]:
                            report.broken(raw.id, "differs from the archived entry of that id")
                        continue
                    _entry(report, raw._mapping, entries, anchors)
                after = page[-1].id
                if progress is not None:
                    progress(report.rows)
            marks = _marks(report, (await conn.execute(select(*fences.stored))).all(), fences)
            head_row = select(*head.stored).where(AuditHead.id == HEAD_ROW)
            stored_head = (await conn.execute(head_row)).first()  # the row appends lock; any other is not it
    head_readable = True
    if stored_head is not None:
        try:
            report.stored_head = Head(**head(stored_head._mapping))
        except MalformedRow as exc:
            head_readable = False
            report.violations.append(f"the chain's head row ({AuditHead.__tablename__}) is malformed: {exc}")
    _ends(report, heads, head_readable=head_readable)
    for resource, token in report.highest.items():
        mark = marks.get(resource)
        if resource in marks and mark is None:  # malformed, and said so
            continue
        if mark is None or mark < token:
            report.violations.append(
                f"resource {resource!r}: the mark is {mark} but the trail accepted token {token}"
            )
    return report


def _archived(
    report: AuditReport, archives: Sequence[Path], anchors: Mapping[int, Head], live_first: int | None
) -> dict[int, str]:
    """Check the archives' entries, in id order; the hashes of those the live trail still holds."""
    overlap: dict[int, str] = {}
    for info in sorted((read_info(path) for path in archives), key=lambda info: info.first_id):
        for row in read_entries(info.path):
            linked = _start(report, row["id"], anchors)
            _link(report, row, linked=linked)
            _check(report, row["id"], row["resource"], row["token"], row["mark"], row["outcome"])
            if live_first is not None and row["id"] >= live_first:
                overlap[row["id"]] = row["chain"]
    if overlap:
        report.notes.append(
            f"{len(overlap)} archived entries are still in the trail (an archive run was cut short: "
            "run it again to finish)"
        )
    return overlap


def _start(report: AuditReport, row_id: int, anchors: Mapping[int, Head]) -> bool:
    """Whether the entry can be linked to the one before it: the first one read after entries that
    were archived (and not given) links only to an exported head of the entry before it."""
    if report.rows == 0 and row_id > 1:  # entries before it were archived
        report.archived = row_id - 1
        anchor = anchors.get(report.archived)
        report.chain = anchor or report.chain
        return anchor is not None
    return True


def _entry(report: AuditReport, raw: Mapping[Any, Any], decode: Decoder, anchors: Mapping[int, Head]) -> None:
    """Check one entry as stored: decoded, linked to the entry before it, its tokens in order."""
    row_id: int = raw["id"]
    linked = _start(report, row_id, anchors)
    try:
        if row_id < 1:
            raise MalformedRow(f"id {row_id} is below 1, where fencegate numbers entries from", column="id")
        row = decode(raw)
    except MalformedRow as exc:  # nothing of it can be trusted; the chain goes on from its stored hash
        _count(report, row_id)
        report.malformed.append(row_id)
        report.broken(row_id, f"malformed entry: {exc}")
        _go_on(report, row_id, decode.get(raw, "chain"))
        return
    _link(report, row, linked=linked)
    _check(report, row_id, row["resource"], row["token"], row["mark"], row["outcome"])


def _marks(report: AuditReport, rows: Sequence[Row[Any, Any]], decode: Decoder) -> dict[str, int | None]:
    """The marks by resource; a malformed one is a violation, and None here."""
    marks: dict[str, int | None] = {}
    for raw in rows:
        try:
            fence = decode(raw._mapping)
        except MalformedRow as exc:
            resource = decode.get(raw._mapping, "resource")
            whose = (
                f"the mark of resource {resource!r}"
                if resource is not None
                else f"a mark ({Fence.__tablename__})"
            )
            report.violations.append(f"{whose} is malformed: {exc}")
            if resource is not None:
                marks[resource] = None
            continue
        marks[fence["resource"]] = fence["token"]
    return marks


def _link(report: AuditReport, row: Mapping[Any, Any], *, linked: bool = True) -> None:
    """Check that `row` follows from the entry before it (if `linked`); go on from its stored hash."""
    before, row_id, stored = report.chain, row["id"], row["chain"]
    if stored is None:
        report.broken(row_id, "carries no hash: it was inserted by something other than fencegate")
    elif linked and entry_hash(before.hash, row) != stored:
        gap = (
            f", entries {before.last_id + 1}..{row_id - 1} are missing" if row_id > before.last_id + 1 else ""
        )
        after = f"entry {before.last_id}" if before.last_id else "the start of the trail"
        report.broken(
            row_id,
            f"its hash does not follow from {after}{gap}: this entry was changed, or an entry before it "
            "was changed, removed or inserted out of order",
        )
    _go_on(report, row_id, stored)


def _go_on(report: AuditReport, row_id: int, stored: str | None) -> None:
    """The next entry links to this one's stored hash (so one edit is one break); note an exported one."""
    report.chain = Head(row_id, stored or "")
    if row_id in report._hashes:
        report._hashes[row_id] = stored or ""


def _ends(report: AuditReport, heads: Sequence[Head], *, head_readable: bool = True) -> None:
    """The trail ends where the head row says, and holds every exported head."""
    stored, last = report.stored_head, report.chain
    if not head_readable:
        pass  # malformed, and said so
    elif stored is None:
        report.violations.append("the chain's head row (fencegate_audit_head) is missing")
    elif stored != last:
        report.violations.append(
            f"the trail ends at {last} but the head row says {stored}: "
            + (
                "entries were removed from the tail"
                if stored.last_id > last.last_id
                else "the tail was changed"
            )
        )
    for head in heads:
        found = report._hashes.get(head.last_id) or None
        if head.last_id <= report.archived:
            if head.last_id < report.archived and report.archived in report._hashes:
                report.notes.append(f"exported head {head}: archived, not checked")
            elif head.last_id < report.archived:  # no head vouches for the cut: anyone may have made it
                report.violations.append(
                    f"exported head {head}: entry {head.last_id} is not in the trail, which starts after "
                    f"entry {report.archived}: entries were removed from its start (if they were archived, "
                    f"give the head exported then too: --head HASH@{report.archived})"
                )
        elif found is None:
            report.violations.append(
                f"exported head {head}: entry {head.last_id} is not in the trail: the tail was truncated"
            )
        elif found != head.hash:
            report.violations.append(
                f"exported head {head}: entry {head.last_id} now hashes to {found}: "
                "the trail was rewritten up to it"
            )


def _count(report: AuditReport, row_id: int) -> None:
    report.rows += 1
    report.first_id = row_id if report.first_id is None else report.first_id
    report.last_id = row_id


def _check(
    report: AuditReport, row_id: int, resource: str | None, token: int | None, mark: int | None, outcome: str
) -> None:
    _count(report, row_id)
    report.outcomes[outcome] += 1
    if outcome in FENCE_PASSED and resource is not None and token is not None:
        before = report.highest.get(resource)
        if before is not None and token < before:
            report.violations.append(
                f"entry {row_id}: resource {resource!r} accepted token {token} after token {before}"
            )
        report.highest[resource] = max(token, before or 0)
    elif outcome == "stale_token" and token is not None and mark is not None and token >= mark:
        report.violations.append(f"entry {row_id}: token {token} refused as stale by a mark of {mark}")
