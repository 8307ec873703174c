"""Idempotency records expire: deleted in the background, oldest first, a few hundred per transaction.

A record is kept for the gateway's `--idempotency-ttl` from its write; then
`expire_idempotency` deletes it and its key may be used afresh (a retry
later than that is a new request: its fence check runs again). Each batch is
its own short transaction (`EXPIRY_BATCH` rows found by the index on `at`, `EXPIRY_PAUSE` or
`EXPIRY_DUTY` times its own duration apart, whichever is longer),
so the write lock (SQLite) or the rows (PostgreSQL) are held for a few
milliseconds at a time, and fenced writes go between the batches.

Several replicas on one PostgreSQL: each batch first takes a transaction-level
advisory lock with `pg_try_advisory_xact_lock`; a replica that does not get it
leaves the round to the one that has it (nothing waits; a crashed holder's
lock ends with its transaction). The batch's rows are taken `FOR UPDATE SKIP
LOCKED`, so a record a concurrent request holds is left for the next round
instead of waited on. SQLite is one machine: its write lock orders the batches,
and the gateway hands each one to its group-commit writer, which deletes it
inside a transaction of fenced writes just before their `COMMIT`
(`batch.py`): a transaction of its own would cost an fsync and, worse, make
the writer that finds the lock held sleep in SQLite's busy handler.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnClause, Delete, delete, literal_column, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.errors import map_storage_errors
from storage.models import IdempotencyRecord

log = logging.getLogger(__name__)

Step = Callable[[datetime, int], Awaitable[int]]  # one batch of the expiry: the records it deleted

EXPIRY_BATCH = 200  # records deleted per transaction: a few milliseconds of the write lock
# seconds between two batches at least: the fenced writes get the lock between them without waiting on a
# busy handler's back-off (SQLite's sleeps up to 100 ms)
EXPIRY_PAUSE = 0.02
# and at least this many times the last batch's own duration: a batch waits for a busy writer's commit
# (SQLite) or a loaded server, so under load the sweep slows down by itself and takes a small share
EXPIRY_DUTY = 4.0
# One batch on SQLite, run by the group-commit writer inside one of its transactions (`writer.py`):
# the oldest records by the index on `at`, deleted by rowid
EXPIRY_DELETE = (
    "DELETE FROM fencegate_idempotency WHERE rowid IN "
    "(SELECT rowid FROM fencegate_idempotency WHERE at < :before ORDER BY at LIMIT :limit)"
)
EXPIRY_LOCK = 0x6578706972  # "expir": the advisory lock one PostgreSQL replica at a time expires under


def _batch_delete(dialect: str, before: datetime, batch: int) -> Delete:
    """Delete up to `batch` records written before `before`, oldest first, by their physical row."""
    row: ColumnClause[Any] = literal_column("ctid" if dialect == "postgresql" else "rowid")
    oldest = (
        select(row)
        .select_from(IdempotencyRecord)
        .where(IdempotencyRecord.at < before)
        .order_by(IdempotencyRecord.at)
        .limit(batch)
    )
    if dialect == "postgresql":
        oldest = oldest.with_for_update(skip_locked=True)
    return delete(IdempotencyRecord).where(row.in_(oldest))


async def _one_batch(engine: AsyncEngine, before: datetime, batch: int) -> int | None:
    """Records deleted by one transaction, or None if another replica holds the expiry lock."""
    dialect = engine.dialect.name
    async with engine.begin() as conn:
        if dialect == "postgresql":
            locked = await conn.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": EXPIRY_LOCK})
            if not locked.scalar_one():
                return None
        result = await conn.execute(_batch_delete(dialect, before, batch))
        deleted: int = result.rowcount
        return deleted


async def expire_idempotency(
    engine: AsyncEngine,
    *,
    before: datetime,
    batch: int = EXPIRY_BATCH,
    pause: float = EXPIRY_PAUSE,
    step: Step | None = None,
) -> int:
    """Delete every idempotency record written before `before`, `batch` per transaction, `pause`
    seconds or `EXPIRY_DUTY` times the batch's duration apart; the count deleted (0 if another
    replica is at it). Each batch is a transaction of its own on `engine`, or `step`'s (the SQLite
    group-commit writer's `expire`). `StorageError` if the database fails."""
    deleted = 0
    clock = asyncio.get_running_loop().time
    with map_storage_errors("idempotency expiry"):
        while True:
            started = clock()
            done = await (_one_batch(engine, before, batch) if step is None else step(before, batch))
            if done is None:
                return deleted
            deleted += done
            if done < batch:
                return deleted
            await asyncio.sleep(max(pause, EXPIRY_DUTY * (clock() - started)))
