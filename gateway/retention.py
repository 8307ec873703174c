"""The gateway's background retention: idempotency records expire, and SQLite gives back free pages.

One cleanup context owns an engine of its own (its pool apart from the one
serving requests, so a sweep never waits for a request's connection or holds
one a request needs) and one task. The task wakes every `sweep_pause(ttl)`
seconds, at most `SWEEP_EVERY`, so a record past its TTL is gone within that
long of its expiry; every replica runs it, and on PostgreSQL one at a time does
the work (`storage.expiry`). On SQLite each sweep then returns the file's
free pages to the file system (`storage.vacuum`). A failed sweep is logged
and tried again at the next wake-up: it changed nothing it did not commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.keys import AppKeys
from gateway.metrics import Metrics
from gateway.storage_tls import open_storage
from storage import StorageError
from storage.expiry import expire_idempotency
from storage.vacuum import INCREMENTAL, auto_vacuum_mode, reclaim

log = logging.getLogger("gateway")

SWEEP_EVERY = 15.0  # seconds between sweeps at most: a record past its TTL is gone well within a minute


def sweep_pause(ttl: float) -> float:
    """Seconds between two sweeps: `SWEEP_EVERY`, or the TTL if shorter (a 5 s TTL is swept every 5 s)."""
    return min(SWEEP_EVERY, ttl)


def _sqlite_file(engine: AsyncEngine) -> str | None:
    return engine.url.database if engine.dialect.name == "sqlite" else None


async def _sweep(engine: AsyncEngine, ttl: float, metrics: Metrics) -> None:
    cutoff = datetime.now(UTC) - timedelta(seconds=ttl)
    expired = await expire_idempotency(engine, before=cutoff)
    if expired:
        metrics.idempotency_expired.inc(expired)
        log.info("idempotency records expired: %d written before %s", expired, cutoff.isoformat())
    if (path := _sqlite_file(engine)) is not None and (freed := await reclaim(path)):
        log.info("SQLite pages given back to the file system: %d", freed)


async def _sweep_forever(engine: AsyncEngine, ttl: float, metrics: Metrics) -> None:
    while True:
        await asyncio.sleep(sweep_pause(ttl))
        try:
            await _sweep(engine, ttl, metrics)
        except StorageError as exc:
            log.warning("retention sweep failed, tried again in %g s: %s", sweep_pause(ttl), exc)


async def _check_auto_vacuum(engine: AsyncEngine) -> None:
    """Warn, with the fix, about a SQLite file made before auto_vacuum: its deletes never shrink it."""
    path = _sqlite_file(engine)
    if path is None:
        return
    try:
        mode = await asyncio.to_thread(auto_vacuum_mode, path)
    except StorageError as exc:
        log.warning("SQLite auto_vacuum not read: %s", exc)
        return
    if mode != INCREMENTAL:
        log.warning(
            "SQLite file %s has auto_vacuum %d, not incremental: the space of deleted objects is reused but "
            "never given back; with the gateway stopped, run once: sqlite3 %s "
            "'PRAGMA auto_vacuum=INCREMENTAL; VACUUM;' (docs/operations.md)",
            path,
            mode,
            path,
        )


async def retention_ctx(app: web.Application) -> AsyncIterator[None]:
    """The sweep task over an engine of its own, stopped and disposed of at shutdown."""
    settings = app[AppKeys.settings]
    engine = open_storage(settings.storage_url, command_timeout=settings.storage_timeout)
    ttl = settings.idempotency_ttl
    log.info("idempotency records expire %s after their write (--idempotency-ttl)", ttl)
    await _check_auto_vacuum(engine)
    task = asyncio.create_task(_sweep_forever(engine, ttl, app[AppKeys.metrics]), name="fencegate-retention")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await engine.dispose()
