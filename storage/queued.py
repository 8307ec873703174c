"""What both group-commit stores share: a fenced request queued as an `Op`, answered through its future.

`QueuedStore` is the `ObjectStore` surface of a store that batches fenced
requests: PUT, fenced GET and DELETE, and refusals for the audit trail go
through `_submit` (queued, then the subclass's writer woken); plain reads go to the subclass's
reader, listing and marks to the per-request store underneath; none of them
waits behind a batch.

A queued fenced request waits for its answer at most `deadline` seconds in
all (on PostgreSQL, `--storage-timeout`), behind earlier batches included. A
request whose caller stops waiting (that deadline, or the request's own)
while no batch has taken it yet leaves the queue: it is never run.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from storage.errors import StorageUnavailable
from storage.protocols import FencedRequest, ObjectData, ObjectMeta, ObjectStore, Refused
from storage.sql import SqlObjectStore

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)  # by identity: two identical retries are two requests
class Op:
    """A queued fenced request, or refusals to append to the audit trail; answered through `future`."""

    request: FencedRequest | None
    refusals: Sequence[Refused] = ()
    future: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Answer one queued request, unless its caller already gave up (a deadline answered 503)."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class QueuedStore(ObjectStore):
    """The `ObjectStore` methods of a batching store; subclasses define its writer's life and queue."""

    def __init__(self, store: SqlObjectStore, *, max_batch: int, deadline: float | None = None) -> None:
        self._store = store
        self._max_batch = max(1, max_batch)
        self._deadline = deadline
        self._pending: deque[Op] = deque()  # submitted, not yet in a batch
        self._running = False  # taking requests
        self.batches = 0  # committed batches (tests read it to see that batching happened)
        self._failed = 0  # batches not committed since the last one that was

    def _not_committed(self, batch: list[Op], exc: BaseException) -> None:
        """Answer every request of a batch that was not committed 503, its cause in the log only."""
        self._failed += 1
        log.error(
            "a group commit of %d requests was not committed; each is answered 503", len(batch), exc_info=exc
        )
        for op in batch:
            failure = StorageUnavailable("the batch holding this request was not committed; retry")
            failure.__cause__ = exc
            settle(op.future, False, failure)

    def _committed(self) -> None:
        """Count a committed batch; the first after failures says so, or the log ends on the errors."""
        self.batches += 1
        if self._failed:
            log.info("group commit works again: a batch committed after %d that were not", self._failed)
            self._failed = 0

    async def start(self) -> None:
        """Start the writer; requests are taken from then on."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Refuse new requests, commit the pending ones, stop the writer."""
        raise NotImplementedError

    async def ping(self) -> None:
        raise NotImplementedError

    def _wake_writer(self) -> None:
        """Tell the writer that `_pending` has a request; it takes it with its next batch."""
        raise NotImplementedError

    async def _submit(self, op: Op) -> Any:
        """Queue `op` for the writer, then wait for its answer."""
        if not self._running:
            raise StorageUnavailable(
                "the store is not accepting writes (shutting down); retry on another gateway"
            )
        self._pending.append(op)
        self._wake_writer()
        return await self._answer(op)

    async def _answer(self, op: Op) -> Any:
        """`op`'s outcome once its batch settled, or 503 once the deadline from its queueing passed.

        Refusals for the audit trail stay queued whatever their caller does: they are written once,
        with a later batch, and never lost to a shutdown that cancels their writer."""
        if op.request is None:
            return await op.future
        deadline = asyncio.timeout(self._deadline)
        try:
            async with deadline:
                return await op.future
        except asyncio.CancelledError:  # the request's own deadline, or its client went away
            self._abandon(op)
            raise
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            if self._abandon(op):
                raise StorageUnavailable(
                    f"no batch took this request within {self._deadline:g} s (the storage deadline); "
                    "it was not applied; retry"
                ) from exc
            raise StorageUnavailable(
                f"the batch holding this request did not commit within {self._deadline:g} s (the storage "
                "deadline); its outcome is unknown; retry with the same Idempotency-Key"
            ) from exc

    def _abandon(self, op: Op) -> bool:
        """Nobody waits for `op` any more: its answer is dropped; True if it left the queue unrun."""
        op.future.cancel()
        try:
            self._pending.remove(op)
        except ValueError:
            return False  # a batch holds it
        return True

    async def fenced(self, request: FencedRequest) -> ObjectMeta | ObjectData:
        outcome: ObjectMeta | ObjectData = await self._submit(Op(request))
        return outcome

    async def record_refusals(self, entries: Sequence[Refused]) -> None:
        """Refusals ride along in the next batch: no commit of their own."""
        if entries:
            await self._submit(Op(None, refusals=tuple(entries)))

    async def list(self, prefix: str, *, after: str, limit: int) -> list[ObjectMeta]:
        return await self._store.list(prefix, after=after, limit=limit)

    async def mark(self, resource: str) -> int:
        return await self._store.mark(resource)

    async def marks_count(self) -> int:
        return await self._store.marks_count()
