"""The audit trail of refused requests: buffered, written in batches, flushed at shutdown.

Accepted fenced requests are recorded by the store in the transaction of
their change (`storage/records.py`). A refusal changed nothing, so its entry
need not share a transaction with anything: entries are collected here and
written every `FLUSH_INTERVAL` in one transaction (on SQLite they ride along
in the next group commit). That keeps a flood of bad requests from costing
one commit each. The price, written in docs/security.md: refusals from the
last fraction of a second before a crash may be missing, and when the buffer
is full (storage down for long) the oldest refusals are dropped and counted
in `fencegate_audit_dropped_total`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from datetime import UTC, datetime

from aiohttp import web

from gateway.fencing_token import token_or_none
from gateway.metrics import Metrics
from storage.errors import StorageError
from storage.models import MAX_CLIENT_LENGTH, MAX_KEY_LENGTH, MAX_RESOURCE_LENGTH
from storage.protocols import ObjectStore, Refused

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.2  # seconds between writes of buffered refusals
MAX_PENDING = 10_000  # refusals held while storage is unreachable; older ones are dropped past it
FLUSH_BATCH = 1_000  # refusals per transaction


def _clean(value: object, limit: int) -> str | None:
    """A client-controlled string made safe for a bounded text column (printable ASCII, cut)."""
    if value is None:
        return None
    text = str(value)
    return "".join(c if c.isascii() and c.isprintable() else "?" for c in text[:limit])


class AuditLog:
    """Collects refusals and writes them to the store in the background."""

    def __init__(self, store: ObjectStore, *, metrics: Metrics) -> None:
        self._store = store
        self._metrics = metrics
        self._pending: deque[Refused] = deque()
        self._wake = asyncio.Event()

    def refused(self, request: web.Request, client: str, status: int, body: dict[str, object]) -> None:
        """Queue the refusal of `request` (answered `status` with `body`)."""
        key = request.match_info.get("key") or request.match_info.get("resource")
        header_resource = request.headers.get("Fencing-Resource")
        resource = body.get("resource", header_resource if header_resource is not None else key)
        token, highest = body.get("token"), body.get("highest")
        entry = Refused(
            at=datetime.now(UTC),
            client=_clean(client, MAX_CLIENT_LENGTH) or "-",
            method=request.method[:8],
            key=_clean(key, MAX_KEY_LENGTH),
            resource=_clean(resource, MAX_RESOURCE_LENGTH),
            token=token if isinstance(token, int) else token_or_none(request.headers.get("Fencing-Token")),
            mark=highest if isinstance(highest, int) else None,
            status=status,
            outcome=str(body.get("error", "refused"))[:64],
        )
        if len(self._pending) >= MAX_PENDING:
            self._pending.popleft()
            self._metrics.audit_dropped.inc()
        self._pending.append(entry)
        if len(self._pending) >= FLUSH_BATCH:
            self._wake.set()

    async def flush(self) -> None:
        """Write what is buffered; on a storage failure keep it for the next try."""
        while self._pending:
            batch = [self._pending.popleft() for _ in range(min(FLUSH_BATCH, len(self._pending)))]
            try:
                await self._store.record_refusals(batch)
            except StorageError as exc:
                self._pending.extendleft(reversed(batch))
                while len(self._pending) > MAX_PENDING:
                    self._pending.popleft()
                    self._metrics.audit_dropped.inc()
                log.warning("audit: %d refusals not written yet: %s", len(self._pending), exc)
                return

    async def run(self) -> None:
        """Flush every `FLUSH_INTERVAL` (sooner when a batch is full) until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_INTERVAL):
                    await self._wake.wait()
            self._wake.clear()
            await self.flush()
