"""The gateway's background retention: idempotency records expire on a schedule.

One cleanup context owns an engine of its own (its pool apart from the one
serving requests, so a sweep never waits for a request's connection or holds
one a request needs) and one task. The task wakes every `sweep_pause(ttl)`
seconds, at most `SWEEP_EVERY`, so a record past its TTL is gone within that
long of its expiry; every replica runs it, and on PostgreSQL one at a time does
the work (`storage.expiry`). A failed sweep is logged and tried again at the
next wake-up: it changed nothing it did not commit.
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

log = logging.getLogger("gateway")

SWEEP_EVERY = 15.0  # seconds between sweeps at most: a record past its TTL is gone well within a minute


def sweep_pause(ttl: float) -> float:
    """Seconds between two sweeps: `SWEEP_EVERY`, or the TTL if shorter (a 5 s TTL is swept every 5 s)."""
    return min(SWEEP_EVERY, ttl)


async def _expire_forever(engine: AsyncEngine, ttl: float, metrics: Metrics) -> None:
    while True:
        await asyncio.sleep(sweep_pause(ttl))
        cutoff = datetime.now(UTC) - timedelta(seconds=ttl)
        try:
            expired = await expire_idempotency(engine, before=cutoff)
        except StorageError as exc:
            log.warning("idempotency expiry failed, tried again in %g s: %s", sweep_pause(ttl), exc)
            continue
        if expired:
            metrics.idempotency_expired.inc(expired)
            log.info("idempotency records expired: %d written before %s", expired, cutoff.isoformat())


async def retention_ctx(app: web.Application) -> AsyncIterator[None]:
    """The expiry task over an engine of its own, stopped and disposed of at shutdown."""
    settings = app[AppKeys.settings]
    engine = open_storage(settings.storage_url, command_timeout=settings.storage_timeout)
    ttl = settings.idempotency_ttl
    log.info("idempotency records expire %s after their write (--idempotency-ttl)", ttl)
    task = asyncio.create_task(
        _expire_forever(engine, ttl, app[AppKeys.metrics]), name="fencegate-idempotency-expiry"
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await engine.dispose()
