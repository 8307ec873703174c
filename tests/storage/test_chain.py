"""The audit trail is a hash chain: an edited, removed, reordered or replayed entry is found, and so is a
truncated tail (against the head row, and against an exported head when the head row was rewritten too).

Each test runs on every sink of audit entries: the per-request store and the group-commit writer, on
SQLite and on a fresh PostgreSQL database of its own (a whole-trail check). The last test runs two
replicas on one PostgreSQL at once and checks that the chain did not fork.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from fencegate.lab.cluster import LocalCluster
from storage import BelowMark, ObjectNotFound, SqlObjectStore, migrate, open_engine
from storage import chain as chain_module
from storage.chain import GENESIS_HEAD, Head, entry_hash, link, read_head
from storage.models import AuditEntry, AuditHead
from storage.protocols import ObjectStore, Refused
from storage.queued import QueuedStore
from storage.sqlite.group_commit import GroupCommitStore
from storage.verify import AuditReport, verify_audit
from tests.databases import fresh_database

ENTRIES = 8  # what `write_trail` leaves in the trail
COLUMNS = tuple(AuditEntry.__table__.columns)


@dataclass
class Trail:
    store: ObjectStore
    engine: AsyncEngine


async def _batching(sql: SqlObjectStore, engine: AsyncEngine) -> QueuedStore:
    if engine.dialect.name == "sqlite":
        assert engine.url.database is not None
        return GroupCommitStore(sql, path=engine.url.database)
    from storage.postgresql.group_commit import PgGroupCommitStore

    return PgGroupCommitStore(sql, engine=engine)


@pytest.fixture(params=["sqlite", "sqlite-group-commit", "postgresql", "postgresql-group-commit"])
async def trail(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Trail]:
    """A store on a database of its own, holding the trail of `write_trail`."""
    async with (
        fresh_database(request.getfixturevalue("postgres_cluster"), "chain")
        if request.param.startswith("postgresql")
        else _sqlite(tmp_path)
    ) as url:
        engine = open_engine(url)
        await migrate(engine)
        sql = SqlObjectStore(engine)
        try:
            if request.param.endswith("group-commit"):
                batching = await _batching(sql, engine)
                await batching.start()
                try:
                    await write_trail(batching)
                    yield Trail(batching, engine)
                finally:
                    await batching.aclose()
            else:
                await write_trail(sql)
                yield Trail(sql, engine)
        finally:
            await engine.dispose()


class _sqlite:
    def __init__(self, tmp_path: Path) -> None:
        self._url = f"sqlite:///{tmp_path / 'chain.db'}"

    async def __aenter__(self) -> str:
        return self._url

    async def __aexit__(self, *_: object) -> None:
        return None


async def write_trail(store: ObjectStore) -> None:
    """`ENTRIES` entries: accepted writes, a stale refusal, a fenced delete of a missing key, refusals."""
    for token in (1, 2, 3):
        await store.put("k/a", f"v{token}".encode(), resource="r", token=token)
    with pytest.raises(BelowMark):
        await store.put("k/a", b"old", resource="r", token=1)  # refused: written by the gateway's AuditLog
    await store.put("k/b", b"b", resource="r", token=4)
    with pytest.raises(ObjectNotFound):
        await store.delete("k/none", resource="r", token=4)
    now = datetime.now(UTC)
    await store.record_refusals(
        [
            Refused(now, "hostile", "PUT", "k/a", "r", 1, 4, 409, "stale_token"),
            Refused(now, "hostile", "PUT", "k/a", None, None, None, 428, "token_required"),
        ]
    )
    await store.put("k/c", b"c", resource="s", token=1)


async def check(engine: AsyncEngine, *heads: Head) -> AuditReport:
    report = await verify_audit(engine, heads=heads)
    print("\n".join(report.lines()))
    return report


async def entry(engine: AsyncEngine, row_id: int) -> dict[str, object]:
    async with engine.connect() as conn:
        row = (await conn.execute(select(*COLUMNS).where(AuditEntry.id == row_id))).one()
    return dict(row._mapping)


async def test_an_untouched_trail_verifies_and_its_head_is_the_last_entry(trail: Trail) -> None:
    report = await check(trail.engine)
    assert report.ok
    assert report.first_break is None
    assert (report.rows, report.first_id, report.last_id) == (ENTRIES, 1, ENTRIES)
    assert report.chain == report.stored_head == await read_head(trail.engine)
    assert (await check(trail.engine, report.chain)).ok  # its own head, exported


async def test_progress_is_told_the_entries_checked_after_each_page(trail: Trail) -> None:
    seen: list[int] = []
    report = await verify_audit(trail.engine, progress=seen.append)
    assert report.ok
    assert seen == [ENTRIES]  # one page here


async def test_an_edited_entry_is_found_even_when_its_hash_was_recomputed(trail: Trail) -> None:
    async with trail.engine.begin() as conn:
        await conn.execute(update(AuditEntry).where(AuditEntry.id == 3).values(client="someone-else"))
    report = await check(trail.engine)
    assert (report.ok, report.first_break) == (False, 3)
    assert "entry 3: its hash does not follow from entry 2" in report.violations[0]
    # A careful forger also rewrites the edited entry's hash: the link to the next one breaks instead.
    previous = str((await entry(trail.engine, 2))["chain"])
    forged = entry_hash(previous, await entry(trail.engine, 3))
    async with trail.engine.begin() as conn:
        await conn.execute(update(AuditEntry).where(AuditEntry.id == 3).values(chain=forged))
    assert (await check(trail.engine)).first_break == 4


async def test_a_removed_entry_is_found(trail: Trail) -> None:
    async with trail.engine.begin() as conn:
        await conn.execute(delete(AuditEntry).where(AuditEntry.id == 5))
    report = await check(trail.engine)
    assert (report.ok, report.first_break) == (False, 6)
    assert "entries 5..5 are missing" in report.violations[0]


async def test_reordered_entries_are_found(trail: Trail) -> None:
    third, fourth = await entry(trail.engine, 3), await entry(trail.engine, 4)
    async with trail.engine.begin() as conn:  # swap everything but the ids, hashes included
        for row_id, other in ((3, fourth), (4, third)):
            values = {k: v for k, v in other.items() if k != "id"}
            await conn.execute(update(AuditEntry).where(AuditEntry.id == row_id).values(**values))
    report = await check(trail.engine)
    assert (report.ok, report.first_break) == (False, 3)


async def test_an_entry_inserted_out_of_order_is_found(trail: Trail) -> None:
    """An old entry replayed at the end with its own hash, and a new one without a hash."""
    replayed = await entry(trail.engine, 2)
    async with trail.engine.begin() as conn:
        await conn.execute(insert(AuditEntry).values({**replayed, "id": ENTRIES + 1}))
    report = await check(trail.engine)
    assert (report.ok, report.first_break) == (False, ENTRIES + 1)
    async with trail.engine.begin() as conn:
        await conn.execute(delete(AuditEntry).where(AuditEntry.id == ENTRIES + 1))
        await conn.execute(insert(AuditEntry).values({**replayed, "id": ENTRIES + 1, "chain": None}))
    report = await check(trail.engine)
    assert report.first_break == ENTRIES + 1
    assert "carries no hash" in report.violations[0]


async def test_a_truncated_tail_is_found_by_the_head_row_and_by_an_exported_head(trail: Trail) -> None:
    exported = await read_head(trail.engine)
    async with trail.engine.begin() as conn:
        await conn.execute(delete(AuditEntry).where(AuditEntry.id > ENTRIES - 2))
    report = await check(trail.engine)
    assert not report.ok
    assert report.first_break is None  # what is left is a valid chain
    assert "entries were removed from the tail" in report.violations[0]
    # The operator rewrites the head row too: only the head exported before catches it now.
    shorter = report.chain
    async with trail.engine.begin() as conn:
        await conn.execute(update(AuditHead).values(last_id=shorter.last_id, hash=shorter.hash))
    assert (await check(trail.engine)).ok
    report = await check(trail.engine, exported)
    assert not report.ok
    assert f"entry {ENTRIES} is not in the trail: the tail was truncated" in report.violations[0]


async def test_a_rewritten_chain_is_found_by_an_exported_head(trail: Trail) -> None:
    """The whole chain rewritten from entry 2 on, head row and all: consistent, but not what was exported."""
    exported = await read_head(trail.engine)
    previous = str((await entry(trail.engine, 1))["chain"])
    async with trail.engine.begin() as conn:
        await conn.execute(update(AuditEntry).where(AuditEntry.id == 2).values(client="someone-else"))
        for row_id in range(2, ENTRIES + 1):
            row = (await conn.execute(select(*COLUMNS).where(AuditEntry.id == row_id))).one()
            previous = entry_hash(previous, row._mapping)
            await conn.execute(update(AuditEntry).where(AuditEntry.id == row_id).values(chain=previous))
        await conn.execute(update(AuditHead).values(hash=previous))
    assert (await check(trail.engine)).ok
    report = await check(trail.engine, exported)
    assert not report.ok
    assert f"entry {ENTRIES} now hashes to" in report.violations[0]


async def test_the_head_is_logged_each_time_the_trail_passes_a_multiple(
    trail: Trail, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(chain_module, "EXPORT_EVERY", 10)
    with caplog.at_level(logging.INFO, logger="storage.chain"):
        for token in range(5, 10):  # entries 9..13: passes 10 once
            await trail.store.put("k/a", b"x", resource="r", token=token)
    logged = [r.getMessage() for r in caplog.records if r.name == "storage.chain"]
    assert len(logged) == 1, logged
    head = Head.parse(logged[0].split()[3])
    assert head.last_id >= 10
    assert (await check(trail.engine, head)).ok


async def test_two_replicas_on_one_postgresql_do_not_fork_the_chain(postgres_cluster: LocalCluster) -> None:
    """Two gateways' stores (group commit and per request, refusals too) append at once."""
    async with fresh_database(postgres_cluster, "fork") as url:
        engines = [open_engine(url), open_engine(url)]
        await asyncio.gather(*(migrate(e) for e in engines))
        plain = [SqlObjectStore(e) for e in engines]
        replicas: list[ObjectStore] = [await _batching(plain[0], engines[0]), plain[1]]
        batching = replicas[0]
        assert isinstance(batching, QueuedStore)
        await batching.start()
        accepted = [0, 0]  # per replica
        recorded = 0  # refusals written to the trail (a stale token's refusal is the gateway's to record)

        async def write(n: int) -> None:
            nonlocal recorded
            store = replicas[n % 2]
            try:
                await store.put(f"k/{n % 40}", b"x", resource=f"r{n % 4}", token=n)
                accepted[n % 2] += 1
            except BelowMark:
                pass
            if n % 10 == 0:
                refusal = Refused(datetime.now(UTC), "c", "PUT", "k", "r", 0, 1, 409, "stale_token")
                await store.record_refusals([refusal])
                recorded += 1

        try:
            await asyncio.gather(*(write(n) for n in range(1, 401)))
        finally:
            await batching.aclose()
        report = await check(engines[0])
        for engine in engines:
            await engine.dispose()
    assert report.ok, report.violations
    assert min(accepted) > 0  # both replicas appended
    total = sum(accepted) + recorded
    assert (report.rows, report.first_id, report.last_id) == (total, 1, total)  # one chain, no gap
    assert report.chain == report.stored_head


async def test_an_archived_start_is_checked_against_the_head_exported_at_the_archive(trail: Trail) -> None:
    """Archiving deletes the oldest entries; the head of the last archived one anchors the rest."""
    kept = await entry(trail.engine, 3)
    async with trail.engine.begin() as conn:
        await conn.execute(delete(AuditEntry).where(AuditEntry.id <= 3))
    archive = Head(3, str(kept["chain"]))
    report = await check(trail.engine, archive)
    assert report.ok, report.violations
    assert report.archived == 3
    assert (await check(trail.engine)).ok  # without the anchor the first entry is taken as it is
    async with trail.engine.begin() as conn:
        await conn.execute(update(AuditEntry).where(AuditEntry.id == 4).values(client="someone-else"))
    assert (await check(trail.engine, archive)).first_break == 4


async def test_postgresql_appends_in_the_server_exactly_as_entry_hash_chains(
    postgres_cluster: LocalCluster,
) -> None:
    """The group-commit writer's one-statement append hashes byte for byte as `entry_hash` does."""
    from storage.postgresql.group_commit import append

    india = timezone(timedelta(hours=5, minutes=30))
    fields = ("at", "client", "method", "key", "resource", "token", "mark", "status", "outcome")
    awkward: list[dict[str, object]] = [
        dict(zip(fields, values, strict=True))
        for values in (
            (datetime(2026, 11, 27, 9, 1, 2, 345678, tzinfo=india), 'q"\\ ключ 😀', "PUT", "k/ä\n\t\u2028",
             "r/ü", 2**63 - 1, 2**63 - 1, 200, "replayed"),
            (datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), "", "DELETE", None, None, None, None,
             428, "token_required"),
            (datetime(2026, 1, 1, tzinfo=UTC), "c", "GET", "k", "r", 0, 7, 409, "stale_token"),
        )
    ]  # fmt: skip
    many = [awkward[n % 3] | {"token": n, "mark": n + 1} for n in range(300)]  # more than a batch holds
    async with fresh_database(postgres_cluster, "append") as url:
        engine = open_engine(url)
        await migrate(engine)
        try:
            async with engine.connect() as conn:
                pg = (await conn.get_raw_connection()).driver_connection
                assert pg is not None
                async with pg.transaction():
                    first = await append(pg, awkward)
                    second = await append(pg, awkward[:1])
                    third = await append(pg, many)
            stored = [str(row["chain"]) for row in [await entry(engine, i) for i in (1, 2, 3, 4)]]
            report = await check(engine)
        finally:
            await engine.dispose()
    rows, after = link(GENESIS_HEAD, awkward)  # the same entries chained in Python
    again, middle = link(after, awkward[:1])
    _, end = link(middle, many)
    assert first == (GENESIS_HEAD, after)
    assert second == (after, middle)
    assert third == (middle, end)
    assert stored == [row["chain"] for row in [*rows, *again]]
    assert report.ok, report.violations  # the chain holds as `audit verify` reads it
    assert report.chain == report.stored_head == end


async def test_a_second_head_row_does_not_hide_a_truncated_tail(trail: Trail) -> None:
    """The head is the row every append locks (id 1); a row added beside it naming the shorter chain
    is not it, and does not make the cut tail look whole."""
    async with trail.engine.begin() as conn:
        await conn.execute(delete(AuditEntry).where(AuditEntry.id > ENTRIES - 2))
    shorter = (await check(trail.engine)).chain
    async with trail.engine.begin() as conn:
        await conn.execute(insert(AuditHead).values(id=0, last_id=shorter.last_id, hash=shorter.hash))
    report = await check(trail.engine)
    assert not report.ok
    assert "entries were removed from the tail" in report.violations[0]


async def test_an_exported_head_cut_off_with_the_start_of_the_trail_is_found(trail: Trail) -> None:
    """Entries up to and past an exported head deleted from the start: without the head of an archive
    at the cut, nothing vouches for it."""
    exported = Head(2, str((await entry(trail.engine, 2))["chain"]))
    cut = await entry(trail.engine, 4)
    async with trail.engine.begin() as conn:
        await conn.execute(delete(AuditEntry).where(AuditEntry.id <= 4))
    report = await check(trail.engine, exported)
    assert not report.ok
    assert "entries were removed from its start" in report.violations[0]
    archive = Head(4, str(cut["chain"]))  # archived: the head exported at the archive anchors the rest
    assert (await check(trail.engine, exported, archive)).ok
