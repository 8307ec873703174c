"""The gateway's background jobs: idempotency records expire, SQLite gives back free pages, the tables
are measured for the metrics, and with `--audit-retention` old audit entries go to checked archives.

One cleanup context owns an engine of its own (its pool apart from the one
serving requests, so a sweep never waits for a request's connection or holds
one a request needs) and one task. The task wakes every `sweep_pause(ttl)`
seconds, at most `SWEEP_EVERY`, so a record past its TTL is gone within that
long of its expiry; every replica runs it, and on PostgreSQL one at a time does
the work (`storage.expiry`); with SQLite's group commit each batch of it is
deleted inside one of the writer's transactions. On SQLite each sweep then returns the file's
free pages to the file system (`storage.sqlite.vacuum`); a file made without
incremental auto_vacuum is migrated first, at start, when small enough. A failed sweep is logged
and tried again at the next wake-up: it changed nothing it did not commit.

With `--audit-retention`, a second task archives the entries older than it
every `ARCHIVE_EVERY` (or every retention, if shorter) into
`--audit-archive-dir` (`storage.archive.archive_into`: a run cut short is
finished first, so archives never overlap). On PostgreSQL one replica at a
time runs it, under a session advisory lock held for the run; on SQLite its
deletes ride in the group commits, as the expiry's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiohttp import web
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.app_keys import AppKeys
from gateway.metrics import Metrics
from gateway.storage_tls import open_storage
from storage import StorageError
from storage.archive import Chore, archive_into
from storage.expiry import Step, expire_idempotency
from storage.sqlite.group_commit import GroupCommitStore
from storage.sqlite.vacuum import INCREMENTAL, auto_vacuum_mode, migrate_to_incremental, reclaim
from storage.tablesize import table_sizes

log = logging.getLogger("gateway")

SWEEP_EVERY = 15.0  # seconds between sweeps at most: a record past its TTL is gone well within a minute
# seconds between two reads of the tables' rows and bytes: on PostgreSQL two catalog reads, on SQLite a
# count and a page scan of the whole file (storage/tablesize.py), so a large file is first read after
# that long, not at start, where a restarted gateway serves its backlog
SIZES_EVERY = {"postgresql": 300.0, "sqlite": 3600.0}
SMALL_FILE = 256 * 1024 * 1024  # bytes of a SQLite file read at start
# bytes of a SQLite file without incremental auto_vacuum migrated at start: a rewrite of seconds;
# a larger one is left to the operator (docs/operations.md), not sprung on a restart
AUTO_MIGRATE = 1024 * 1024 * 1024
ARCHIVE_EVERY = 3600.0  # seconds between audit archive runs at most: one file an hour
ARCHIVE_LOCK = 0x6172636876  # "archv": the advisory lock one PostgreSQL replica at a time archives under


def sweep_pause(ttl: float) -> float:
    """Seconds between two sweeps: `SWEEP_EVERY`, or the TTL if shorter (a 5 s TTL is swept every 5 s)."""
    return min(SWEEP_EVERY, ttl)


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _sqlite_file(engine: AsyncEngine) -> str | None:
    return engine.url.database if engine.dialect.name == "sqlite" else None


async def _sweep(engine: AsyncEngine, ttl: float, metrics: Metrics, step: Step | None) -> None:
    cutoff = datetime.now(UTC) - timedelta(seconds=ttl)
    expired = await expire_idempotency(engine, before=cutoff, step=step)
    if expired:
        metrics.idempotency_expired.inc(expired)
        log.info("idempotency records expired: %d written before %s", expired, cutoff.isoformat())
    if (path := _sqlite_file(engine)) is not None and (freed := await reclaim(path)):
        log.info("SQLite pages given back to the file system: %d", freed)


async def _sweep_forever(engine: AsyncEngine, ttl: float, metrics: Metrics, step: Step | None) -> None:
    while True:
        await asyncio.sleep(sweep_pause(ttl))
        try:
            await _sweep(engine, ttl, metrics, step)
        except StorageError as exc:
            log.warning("retention sweep failed, tried again in %g s: %s", sweep_pause(ttl), exc)


async def _archive_once(engine: AsyncEngine, retention: float, directory: Path, chore: Chore | None) -> None:
    cutoff = datetime.now(UTC) - timedelta(seconds=retention)
    async with engine.connect() as lock:
        if engine.dialect.name == "postgresql":
            held = await lock.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": ARCHIVE_LOCK})
            if not held.scalar_one():
                return
        try:
            result = await archive_into(engine, directory, before_time=cutoff, chore=chore)
        finally:
            if engine.dialect.name == "postgresql":
                await lock.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ARCHIVE_LOCK})
    if result.archive is not None:
        log.info(
            "audit entries %d..%d archived to %s (ends on %s), %d deleted from the database",
            result.archive.first_id,
            result.archive.last_id,
            result.archive.path,
            result.archive.end,
            result.deleted,
        )


async def _archive_forever(
    engine: AsyncEngine, retention: float, directory: Path, chore: Chore | None
) -> None:
    pause = min(ARCHIVE_EVERY, retention)
    while True:
        await asyncio.sleep(pause)
        try:
            await _archive_once(engine, retention, directory, chore)
        except StorageError as exc:
            log.error(
                "audit archive run failed, nothing unarchived was deleted; tried again in %g s: %s",
                pause,
                exc,
            )


async def _measure_forever(engine: AsyncEngine, metrics: Metrics) -> None:
    """The tables' rows and bytes as gauges, every `SIZES_EVERY` of the engine."""
    every = SIZES_EVERY.get(engine.dialect.name, 3600.0)
    path = _sqlite_file(engine)
    file_bytes = 0 if path is None else await asyncio.to_thread(_file_size, path)
    await asyncio.sleep(every if file_bytes > SMALL_FILE else 0)
    while True:
        try:
            for size in await table_sizes(engine):
                metrics.table_rows.labels(table=size.table).set(size.rows)
                if size.bytes is not None:
                    metrics.table_bytes.labels(table=size.table).set(size.bytes)
        except StorageError as exc:
            log.warning("table sizes not read, tried again in %g s: %s", every, exc)
        await asyncio.sleep(every)


async def _migrate_auto_vacuum(engine: AsyncEngine) -> None:
    """Turn on incremental auto_vacuum, once, in a SQLite file made before fencegate set it (its deletes
    never shrink it): at start, before requests come, if the file is at most `AUTO_MIGRATE` bytes and
    the disk holds its rewrite; otherwise a warning with the fix, and the gateway serves as it is."""
    path = _sqlite_file(engine)
    if path is None:
        return
    try:
        mode = await asyncio.to_thread(auto_vacuum_mode, path)
        if mode == INCREMENTAL:
            return
        size = await asyncio.to_thread(_file_size, path)
        if size > AUTO_MIGRATE:
            log.warning(
                "SQLite file %s (%d bytes) has auto_vacuum %d, not incremental: the space of deleted objects "
                "is reused but never given back. Too large to rewrite at start; with the gateway stopped and "
                "%d bytes free beside it, run once: sqlite3 %s 'PRAGMA auto_vacuum=INCREMENTAL; VACUUM;' "
                "(docs/operations.md)",
                path,
                size,
                mode,
                2 * size,
                path,
            )
            return
        log.info(
            "SQLite file %s (%d bytes): migrating to incremental auto_vacuum, once (a VACUUM)", path, size
        )
        done = await migrate_to_incremental(path)
    except StorageError as exc:
        log.warning("SQLite auto_vacuum not migrated, the gateway serves without it: %s", exc)
        return
    if done is not None:
        log.info(
            "SQLite file %s migrated to incremental auto_vacuum in %.1f s: %d bytes, now %d",
            path,
            done.seconds,
            done.bytes_before,
            done.bytes_after,
        )


async def retention_ctx(app: web.Application) -> AsyncIterator[None]:
    """The sweep task over an engine of its own, stopped and disposed of at shutdown."""
    settings = app[AppKeys.settings]
    engine = open_storage(settings.storage_url, command_timeout=settings.storage_timeout)
    ttl = settings.idempotency_ttl
    log.info("idempotency records expire %s after their write (--idempotency-ttl)", ttl)
    await _migrate_auto_vacuum(engine)
    store = app.get(AppKeys.store)
    # on SQLite each expiry or archive deletion batch rides in a group commit: no write lock of its own
    step = store.expire if isinstance(store, GroupCommitStore) else None
    chore = store.chore if isinstance(store, GroupCommitStore) else None
    sweeping = _sweep_forever(engine, ttl, app[AppKeys.metrics], step)
    tasks = [asyncio.create_task(sweeping, name="fencegate-retention")]
    tasks.append(asyncio.create_task(_measure_forever(engine, app[AppKeys.metrics]), name="fencegate-sizes"))
    if settings.audit_retention is not None and settings.audit_archive_dir is not None:
        log.info(
            "audit entries older than %s are archived to %s (--audit-retention)",
            settings.audit_retention,
            settings.audit_archive_dir,
        )
        archiving = _archive_forever(engine, settings.audit_retention, settings.audit_archive_dir, chore)
        tasks.append(asyncio.create_task(archiving, name="fencegate-audit-archive"))
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await engine.dispose()
