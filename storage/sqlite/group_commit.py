"""Group commit on SQLite: many fenced writes, one transaction, one fsync, each fence checked in order.

On SQLite every commit is an fsync (WAL, `synchronous=FULL`) and one writer
holds the lock at a time, so one transaction per request spends its time on
the disk, the write lock and a thread hop per statement. Here requests queue
up; when the previous batch has settled, everything pending (up to
`max_batch`) becomes one transaction (`batch_writer.py`): `BEGIN IMMEDIATE`, then
for each request in queue order the fenced unit (`fenced.py`: binding, fence
upsert, change), then one `COMMIT`.

Where each part runs is chosen for the GIL, which profiling showed to be the
bound: each sqlite3 call releases and retakes it, and on a second thread
every one of those is a hand-off with the busy event loop, turning a 30 us
request into 120 us. So a batch of writes with small bodies (`INLINE_BYTES`
in all) takes the write lock without waiting and runs its statements on the
loop, in-memory B-tree work; only the `COMMIT`, the fsync, goes to the
writer thread, and the loop serves other requests meanwhile. Anything that
could block the loop runs wholly in the writer thread: a batch with large
bodies or fenced reads or deletes, or one that finds the write lock held by
another connection (it waits there, up to the busy timeout). The batches are
driven by callbacks, not a task awaiting a future: the thread's "committed"
callback answers the batch and starts the next one in the same loop
iteration, where a task would lose two more iterations per batch.

Each accepted request also writes its audit entry, and its idempotency
record if it has a key, in the same transaction (`records.py`); a retry
found in that record is answered from it without a fence check. Refusals
recorded by the gateway ride along as one more entry of the next batch.

A refused request needs no savepoint: the unit refuses before it writes
(a stale token or another resource's key), so the request is answered 409
and its neighbours go on. No request is answered before the COMMIT that holds it
returned; if any statement or the commit fails, the batch rolls back and every
request in it gets `StorageUnavailable` (outcome unknown: 503), never 2xx.
A step of the idempotency expiry (`expire`) or of the audit archive's deletion
(`chore`) rides in the next batch the same way, deleted in the writer thread
just before the `COMMIT`.
Reads without a token do not queue: they run beside the writer, on a
thread and connection of their own (`reader.py`, WAL).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from storage.engine import SQLITE_BUSY_TIMEOUT
from storage.errors import StorageError, StorageUnavailable
from storage.expiry import EXPIRY_DELETE
from storage.fenced import FENCED, Policy
from storage.limits import DEFAULT_MAX_BATCH
from storage.protocols import ObjectData
from storage.queued import Op, QueuedStore, settle
from storage.sql import SqlObjectStore
from storage.sqlite.batch_writer import BatchWriter, Expired, Expiry, inline
from storage.sqlite.reader import SqliteReader

log = logging.getLogger(__name__)

_EXPECTED = (sqlite3.Error, OSError, StorageError)  # failures of storage, answered 503 without a traceback
_Job = tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]]


class GroupCommitStore(QueuedStore):
    """`ObjectStore` for SQLite that batches fenced operations; `await start()`, then `aclose()`."""

    def __init__(
        self,
        store: SqlObjectStore,
        *,
        path: str,
        max_batch: int = DEFAULT_MAX_BATCH,
        busy_timeout: float = SQLITE_BUSY_TIMEOUT,
        policy: Policy = FENCED,
    ) -> None:
        super().__init__(store, max_batch=max_batch)
        self._writer = BatchWriter(path, busy_timeout=busy_timeout, policy=policy)
        self._reader = SqliteReader(path, busy_timeout=busy_timeout)
        self._busy = False  # a batch is being applied or committed
        self._idle = asyncio.Event()  # nothing pending, no batch in flight
        self._idle.set()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # steps of background deletions, each run inside the next batch's transaction
        self._expiring: deque[tuple[Expiry, asyncio.Future[int]]] = deque()
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # A daemon thread so that a loop that ends without aclose() cannot hang the process's exit;
        # nothing acknowledged depends on it (an answer waits for its COMMIT).
        self._thread = threading.Thread(
            target=self._work, args=(loop,), name="fencegate-sqlite-writer", daemon=True
        )
        self._thread.start()
        try:
            await self._in_thread(self._writer.open)
        except BaseException:
            self._jobs.put(None)  # the thread ends; the caller never gets to aclose()
            self._thread = None
            raise
        self._reader.start()
        self._running = True

    async def aclose(self) -> None:
        """Refuse new requests, commit the pending ones, stop the writer, the reader and their threads."""
        self._running = False
        if self._thread is None:
            return
        await self._reader.aclose()
        await self._idle.wait()
        try:
            await self._in_thread(self._writer.close)
        finally:
            self._jobs.put(None)
            await asyncio.to_thread(self._thread.join)
            self._thread = None

    def _work(self, loop: asyncio.AbstractEventLoop) -> None:
        """The writer thread: run each job, hand its outcome back to the loop."""
        while (job := self._jobs.get()) is not None:
            run, done = job
            result: Any = None
            error: BaseException | None = None
            try:
                result = run()
            except _EXPECTED as exc:  # handed to the loop, which answers the batch 503
                error = exc
            except Exception as exc:  # the writer must outlive any one batch
                log.exception("the SQLite writer thread failed a job; its requests are answered 503")
                error = exc
            loop.call_soon_threadsafe(done, result, error)

    async def _in_thread(self, run: Callable[[], Any]) -> Any:
        future = asyncio.get_running_loop().create_future()

        def done(result: Any, error: BaseException | None) -> None:
            settle(future, error is None, result if error is None else error)

        self._jobs.put((run, done))
        return await future

    async def expire(self, before: datetime, limit: int) -> int:
        """Delete up to `limit` idempotency records written before `before` inside the next batch's
        transaction (one without requests if none come); the records deleted (`storage.expiry.Step`)."""
        return await self.chore(EXPIRY_DELETE, {"before": self._writer.bind_time(before), "limit": limit})

    async def chore(self, delete: str, params: Mapping[str, Any]) -> int:
        """Run one step of a background deletion (a `DELETE` in SQLite SQL) under a savepoint inside the
        next batch's transaction (one without requests if none come); the rows it deleted."""
        if not self._running:
            raise StorageUnavailable("the store is shutting down; the deletion goes on at the next start")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._expiring.append(((delete, params), future))
        self._wake_writer()
        return await future

    def _wake_writer(self) -> None:
        if not self._busy:
            self._busy = True
            self._idle.clear()
            # After this loop iteration, so the requests that arrive together share the batch.
            asyncio.get_running_loop().call_soon(self._next_batch)

    def _next_batch(self) -> None:
        """Start the next batch, or go idle; on the loop, right after the previous batch settled.

        Callbacks rather than a task: no loop iteration passes between a COMMIT's answer and the next BEGIN.
        """
        if not self._pending and not self._expiring:
            self._busy = False
            self._idle.set()
            return
        batch = [self._pending.popleft() for _ in range(min(self._max_batch, len(self._pending)))]
        expiring = self._expiring.popleft() if self._expiring else None
        expiry = None if expiring is None else expiring[0]
        writer = self._writer
        try:
            # Small writes: statements here; the expiry's delete and the COMMIT (the fsync) in the thread.
            if inline(batch) and writer.begin(wait=False):
                outcomes = writer.apply(batch)
                self._jobs.put(
                    (
                        functools.partial(writer.commit, expiry=expiry),
                        lambda expired, error: self._finish(batch, (outcomes, expired), error, expiring),
                    )
                )
                return
        except Exception as exc:  # noqa: BLE001 - the writer outlives any one batch; _not_committed logs it, 503s
            self._finish(batch, None, exc, expiring, later=True)
            return
        self._jobs.put(
            (
                functools.partial(writer.write, batch, expiry=expiry),
                lambda found, error: self._finish(batch, found, error, expiring),
            )
        )

    def _finish(
        self,
        batch: list[Op],
        found: tuple[list[tuple[bool, Any]], Expired] | None,
        error: BaseException | None,
        expiring: tuple[Expiry, asyncio.Future[int]] | None,
        *,
        later: bool = False,
    ) -> None:
        """Answer every request of a committed batch, or fail them all, and its expiry step; then the
        next batch."""
        if error is None:
            assert found is not None
            outcomes, expired = found
            self._committed()
            for op, (ok, value) in zip(batch, outcomes, strict=True):
                settle(op.future, ok, value)
            if expiring is not None:
                _expired(expiring[1], expired)
        else:
            if batch:
                self._not_committed(batch, error)
            if expiring is not None:
                _expired(expiring[1], error)
        if later:  # a failure on the loop: do not recurse batch after failing batch
            asyncio.get_running_loop().call_soon(self._next_batch)
        else:
            self._next_batch()

    async def read(self, key: str, *, resource: str) -> ObjectData:
        return await self._reader.read(key)

    async def ping(self) -> None:
        await self._store.ping()
        if not self._running or self._thread is None or not self._thread.is_alive():
            raise StorageUnavailable("the group-commit writer is not running; restart the gateway")


def _expired(future: asyncio.Future[int], outcome: int | BaseException) -> None:
    """Answer a deletion step: the rows it deleted, or `StorageUnavailable` (none deleted)."""
    if isinstance(outcome, int):
        settle(future, True, outcome)
        return
    failure = StorageUnavailable("a background deletion's batch was not deleted; tried again later")
    failure.__cause__ = outcome
    settle(future, False, failure)
