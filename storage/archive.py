"""An archive run: the audit entries before a cutoff go to a file, are checked there, then deleted.

Steps, each observable (`PAUSE_AT`), and what a crash after each leaves:

1. `selected`: the range is chosen (the trail's first entry up to the cutoff); nothing written.
2. `written`: the entries are in `FILE.partial`, fsynced; the database is unchanged.
3. `renamed`: the file is in place, whole (renamed after its fsync); the database is unchanged.
4. `checked`: the file was read back whole and matches the database entry for entry.
5. `deleting`: the first batch of `DELETE_BATCH` entries is deleted (each batch its own
   transaction, oldest first, so the trail left is always a whole suffix of the chain; in the
   gateway on SQLite, `CHORE_BATCH` entries inside one of the group-commit writer's transactions,
   under a savepoint just before its `COMMIT`, as the idempotency expiry: a transaction of its own
   would make the writer wait in SQLite's busy handler for the write lock).
6. `deleted`: every archived entry is gone from the database.

After a crash at any step no entry is lost (each is in the file, the
database, or both) and `audit verify --archive FILE` checks the chain across
them. A rerun with the same `--to FILE` finds the whole file, checks that
the database's remaining entries up to its end are the file's, and finishes
the deletion; a `.partial` left behind is written again. A target that
cannot be written stops the run at step 2, before anything is deleted.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.archivefile import ArchiveInfo, Progress, read_info, read_pages, write_archive
from storage.chain import GENESIS, entry_hash
from storage.errors import BadArchive, map_storage_errors
from storage.models import AuditEntry
from storage.statements import AUDIT_COLUMNS

DELETE_BATCH = 5_000  # entries deleted per transaction by `fencegate audit archive` (its `--batch`)
# in the gateway's scheduled run, beside fenced writes: per transaction of its own (PostgreSQL), and
# per group commit of the SQLite writer, each about a millisecond of the locks
SCHEDULED_BATCH = 1_000
CHORE_BATCH = 500
READ_BATCH = 1_000  # entries read per round trip: their decoding holds the loop a few milliseconds
# after each page read, written or checked, and each batch deleted, the run waits this many times as
# long as that step took: the rows' decoding (on the loop), JSON, gzip and hashing share the interpreter
# (the GIL) with the gateway's loop even in a worker thread, so a run takes about 1/(1 + DUTY) of it:
# at 1 (half) a filled store's fenced PUT rate fell to 0.8x; at 3 a run beside a saturated SQLite
# gateway (4,300 PUTs/s) archived about 2,400 entries/s: above a busy day's average append rate, not
# above a peak held all day (docs/operations.md)
ARCHIVE_DUTY = 3.0
# One batch of the deletion on SQLite, run by the group-commit writer inside one of its transactions
ARCHIVE_DELETE = (
    "DELETE FROM fencegate_audit WHERE id IN "
    "(SELECT id FROM fencegate_audit WHERE id <= :last ORDER BY id LIMIT :limit)"
)
# Runs `ARCHIVE_DELETE` in the writer's next transaction: the rows deleted (`GroupCommitStore.chore`)
Chore = Callable[[str, Mapping[str, Any]], Awaitable[int]]
# A test names a step here; the run then says so on stderr and waits there, to be killed (`kill -9`).
PAUSE_AT = "FENCEGATE_ARCHIVE_PAUSE_AT"
STEPS = ("selected", "written", "renamed", "checked", "deleting", "deleted")
_COLUMNS = [getattr(AuditEntry, name) for name in AUDIT_COLUMNS]


@dataclass(frozen=True, slots=True)
class ArchiveResult:
    """What a run did: the archive (None if there was nothing to archive) and the entries deleted."""

    archive: ArchiveInfo | None
    deleted: int


def _step(name: str) -> None:
    """The test hook: with `PAUSE_AT` naming this step, stop here until killed."""
    if os.environ.get(PAUSE_AT) == name:
        print(f"fencegate audit archive: paused at {name}", file=sys.stderr, flush=True)
        while True:  # only a signal ends it; the loop is held on purpose
            time.sleep(3600)


async def _range(engine: AsyncEngine, before_id: int | None, before_time: datetime | None) -> tuple[int, int]:
    """(first, last) ids to archive: the trail's first entry up to the one before the cutoff."""
    async with engine.connect() as conn:
        first = (await conn.execute(select(func.min(AuditEntry.id)))).scalar()
        if before_time is not None:
            newer = select(func.min(AuditEntry.id)).where(AuditEntry.at >= before_time)
            cutoff = (await conn.execute(newer)).scalar()
            last = (
                (await conn.execute(select(func.max(AuditEntry.id)))).scalar()
                if cutoff is None
                else cutoff - 1
            )
        else:
            assert before_id is not None
            last = (
                await conn.execute(select(func.max(AuditEntry.id)).where(AuditEntry.id < before_id))
            ).scalar()
    return (first or 0), (last or 0)


async def _pages(
    engine: AsyncEngine, first: int, last: int, columns: Sequence[Any] = _COLUMNS
) -> AsyncIterator[list[Mapping[Any, Any]]]:
    """The entries `first`..`last` in id order (their `columns`), `READ_BATCH` per round trip."""
    after, clock = first - 1, asyncio.get_running_loop().time
    while after < last:
        started = clock()
        async with engine.connect() as conn:
            query = select(*columns).where(AuditEntry.id > after, AuditEntry.id <= last)
            page = (await conn.execute(query.order_by(AuditEntry.id).limit(READ_BATCH))).all()
        if not page:
            return
        yield [row._mapping for row in page]  # written, or checked against the file, before the next
        after = page[-1].id
        await asyncio.sleep(ARCHIVE_DUTY * (clock() - started))


def _chain_holds(
    info: ArchiveInfo, page: list[dict[str, Any]], previous: str | None, progress: Progress, count: int
) -> str | None:
    """In the worker thread: the page's last hash, after checking each entry hashes onto the one before
    (None: not known); then `progress` told."""
    for entry in page:
        if previous is not None and entry_hash(previous, entry) != entry["chain"]:
            raise BadArchive(
                f"archive {info.path}: entry {entry['id']} does not hash as stored; nothing deleted"
            )
        previous = entry["chain"]
    progress(count)
    return previous


async def _check(engine: AsyncEngine, info: ArchiveInfo, live_first: int, progress: Progress) -> None:
    """The file is whole, its chain holds within it, and each entry still in the database (from
    `live_first` to its end) is the file's; `BadArchive` otherwise. The file is read, and its
    hashes computed, in a worker thread a page at a time; each page is compared with the database's
    ids and hashes (all the check needs of it: the other columns' decoding is spared) as one list."""
    stored = _pages(engine, live_first, info.last_id, (AuditEntry.id, AuditEntry.chain))
    waiting: list[tuple[int, str]] = []  # the database's entries read but not yet compared
    previous = GENESIS if info.first_id == 1 else None
    count = 0
    pages = read_pages(info.path, READ_BATCH)
    while (page := await asyncio.to_thread(next, pages, None)) is not None:
        count += len(page)
        previous = await asyncio.to_thread(_chain_holds, info, page, previous, progress, count)
        filed = [(entry["id"], entry["chain"]) for entry in page if entry["id"] >= live_first]
        while len(waiting) < len(filed) and (more := await anext(stored, None)) is not None:
            waiting += [(row["id"], row["chain"]) for row in more]
        live, waiting = waiting[: len(filed)], waiting[len(filed) :]
        if live != filed:
            first = next(mine for mine, theirs in itertools.zip_longest(filed, live) if mine != theirs)
            differs = f"entry {first[0]} differs from the database's"
            raise BadArchive(f"archive {info.path}: {differs}; nothing deleted")
    if count != info.last_id - info.first_id + 1:
        raise BadArchive(f"archive {info.path} holds {count} entries, not its range's; nothing deleted")


async def _delete_batch(engine: AsyncEngine, last: int, batch: int, chore: Chore | None) -> int:
    """The oldest `batch` entries up to `last` deleted: in a transaction of their own, or `chore`'s."""
    if chore is not None:
        return await chore(ARCHIVE_DELETE, {"last": last, "limit": batch})
    oldest = select(AuditEntry.id).where(AuditEntry.id <= last).order_by(AuditEntry.id).limit(batch)
    async with engine.begin() as conn:
        done: int = (await conn.execute(delete(AuditEntry).where(AuditEntry.id.in_(oldest)))).rowcount
    return done


async def _delete(engine: AsyncEngine, last: int, batch: int, chore: Chore | None) -> int:
    deleted, clock = 0, asyncio.get_running_loop().time
    while True:
        started = clock()
        done = await _delete_batch(engine, last, batch, chore)
        deleted += done
        if done:
            _step("deleting")
        if done < batch:
            return deleted
        await asyncio.sleep(ARCHIVE_DUTY * (clock() - started))


async def archive_audit(
    engine: AsyncEngine,
    *,
    to: Path,
    before_id: int | None = None,
    before_time: datetime | None = None,
    batch: int = DELETE_BATCH,
    chore: Chore | None = None,
    progress: Progress = lambda _count: None,
) -> ArchiveResult:
    """Archive the entries before `before_id` (or written before `before_time`) to `to`, then delete
    them (each batch through `chore` if given). A whole archive already at `to` is resumed (its
    entries still in the database deleted). `progress` is called in the worker thread after each
    page written, then each page read back."""
    with map_storage_errors("audit archive"):
        first, last = await _range(engine, before_id, before_time)
        if await asyncio.to_thread(to.exists):
            info = await asyncio.to_thread(read_info, to)
            if first and first < info.first_id:
                raise BadArchive(f"archive {to} exists and starts after entry {first}; give a new file")
        else:
            if not first or last < first:
                return ArchiveResult(None, 0)
            _step("selected")
            pages = _pages(engine, first, last)
            info = await write_archive(
                to, pages, first_id=first, last_id=last, written=lambda: _step("written"), progress=progress
            )
        _step("renamed")
        if first and first <= info.last_id:
            await _check(engine, info, first, progress)
        _step("checked")
        deleted = await _delete(engine, info.last_id, batch, chore) if first and first <= info.last_id else 0
        _step("deleted")
        return ArchiveResult(info, deleted)


ARCHIVE_NAME = re.compile(r"audit-(\d{12})-(\d{12})\.jsonl\.gz")


def archive_name(first: int, last: int) -> str:
    """The file a scheduled run writes entries `first`..`last` to: its range in its name."""
    return f"audit-{first:012d}-{last:012d}.jsonl.gz"


def _unfinished(directory: Path, live_first: int) -> Path | None:
    """A whole archive in `directory` whose entries are still partly in the database: a run cut short."""
    for path in sorted(directory.iterdir()):
        found = ARCHIVE_NAME.fullmatch(path.name)
        if found is not None and int(found[1]) <= live_first <= int(found[2]):
            return path
    return None


async def archive_into(
    engine: AsyncEngine,
    directory: Path,
    *,
    before_time: datetime,
    chore: Chore | None = None,
    progress: Progress = lambda _count: None,
) -> ArchiveResult:
    """The scheduled run: archive the entries written before `before_time` to a file of `directory`
    named by its range, first finishing a run that was cut short there (so archives never overlap);
    on SQLite the gateway's deletes ride in its group commits (`chore`)."""
    with map_storage_errors("audit archive"):
        first, last = await _range(engine, None, before_time)
    if not first:
        return ArchiveResult(None, 0)
    unfinished = await asyncio.to_thread(_unfinished, directory, first)
    batch = SCHEDULED_BATCH if chore is None else CHORE_BATCH
    if unfinished is not None:
        return await archive_audit(
            engine, to=unfinished, before_id=first, batch=batch, chore=chore, progress=progress
        )
    if last < first:
        return ArchiveResult(None, 0)
    to = directory / archive_name(first, last)
    return await archive_audit(engine, to=to, before_id=last + 1, batch=batch, chore=chore, progress=progress)
