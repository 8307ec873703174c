"""Group commit on SQLite: many fenced writes, one transaction, one fsync, each fence checked in order.

On SQLite every commit is an fsync (WAL, `synchronous=FULL`) and one writer
holds the lock at a time, so one transaction per request spends its time on
the disk, the write lock and a thread hop per statement. Here requests queue
up; one writer task takes everything queued (up to `max_batch`) and runs it
as one transaction: `BEGIN IMMEDIATE`, then for each request in queue order
the fence upsert and the change, then one `COMMIT`.

The statements are the SQLAlchemy constructs of `statements.py`, compiled
once for SQLite and run on a stdlib `sqlite3` connection, so a statement
costs microseconds. Where they run is chosen for the GIL, which profiling
showed to be the bound: each sqlite3 call releases and retakes it, and on a
second thread every one of those is a hand-off with the busy event loop,
turning a 30 us request into 120 us. So a batch of writes with small bodies
(`INLINE_BYTES` in all) takes the write lock without waiting and runs its
statements on the loop, in-memory B-tree work; only the `COMMIT`, the fsync,
goes to the writer thread, and the loop serves other requests meanwhile.
Anything that could block the loop runs wholly in the writer thread as
before: a batch with large bodies or fenced reads or deletes, or one that
finds the write lock held by another connection (it waits there, up to the
busy timeout).

Each accepted request also writes its audit entry, and its idempotency
record if it has a key, in the same transaction (`records.py`); a retry
found in that record is answered from it without a fence check. Refusals
recorded by the gateway ride along as one more entry of the next batch.

A stale request needs no savepoint: the fence upsert is its first
fenced statement and, refused, it changed nothing; the request is answered 409 and its
neighbours go on. No request is answered before the COMMIT that holds it
returned; if any statement or the commit fails, the batch rolls back and every
request in it gets `StorageUnavailable` (outcome unknown: 503), never 2xx.
Reads without a token do not queue: WAL readers run beside the writer.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy.dialects import sqlite as sqlite_dialect

from storage.engine import SQLITE_BUSY_TIMEOUT
from storage.errors import (
    IdempotencyKeyReused,
    ObjectNotFound,
    StaleTokenError,
    StorageError,
    StorageUnavailable,
)
from storage.models import Fence
from storage.protocols import ANONYMOUS, Caller, ObjectData, ObjectMeta, Refused
from storage.records import (
    ACCEPTED,
    FENCE_PASSED,
    NOT_FOUND,
    REPLAYED,
    audit_params,
    idempotency_params,
    refused_params,
    replay,
    status_of,
)
from storage.sql import SqlObjectStore, object_params, stale_token
from storage.statements import IDEMPOTENCY_COLUMNS, META_COLUMNS, OBJECT_COLUMNS, Statements

log = logging.getLogger(__name__)

_TIME_COLUMNS = ("updated_at", "at")
DEFAULT_MAX_BATCH = 256  # requests per transaction; bounds how long one batch holds the write lock
INLINE_BYTES = 1024 * 1024  # body bytes a batch may carry and still have its statements run on the loop


@dataclass(slots=True)
class _Op:
    kind: Literal["put", "get", "delete", "refusals"]
    key: str
    resource: str
    token: int
    data: bytes = b""
    caller: Caller = ANONYMOUS
    refusals: Sequence[Refused] = ()
    future: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class _Compiled:
    """The store's statements as SQLite SQL text with named parameters and their defaults."""

    def __init__(self) -> None:
        dialect = sqlite_dialect.dialect(paramstyle="named")
        statements = Statements.for_dialect("sqlite")
        self.sql: dict[str, tuple[str, dict[str, Any]]] = {}
        names = (
            "fence_upsert",
            "mark_select",
            "object_upsert",
            "object_delete",
            "object_select",
            "audit_insert",
            "idempotency_select",
            "idempotency_insert",
        )
        for name in names:
            compiled = getattr(statements, name).compile(dialect=dialect)
            self.sql[name] = (str(compiled), dict(compiled.params))
        self.bind_time: Callable[[datetime], str] = Fence.updated_at.type.dialect_impl(
            dialect
        ).bind_processor(dialect)
        self._last_time: datetime | None = None
        self._last_bound = ""

    def bind(self, name: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        text, defaults = self.sql[name]
        bound = {**defaults, **params}
        for column in _TIME_COLUMNS:
            if column in bound:
                bound[column] = self._time(bound[column])
        return text, bound

    def _time(self, value: datetime) -> str:
        # A batch stamps every row with one `now`: convert it once, not once per statement.
        if value is not self._last_time:
            self._last_time, self._last_bound = value, self.bind_time(value)
        return self._last_bound

    def run(self, db: sqlite3.Connection, name: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = db.execute(*self.bind(name, params)).fetchone()
        return row


class BatchWriter:
    """One sqlite3 connection and the batch's statements; one caller at a time (the writer task)."""

    def __init__(self, path: str, *, busy_timeout: float) -> None:
        self._path = path
        self._busy_timeout = busy_timeout
        self._db: sqlite3.Connection | None = None
        self._sql = _Compiled()
        self._audits: list[dict[str, Any]] = []  # the batch's audit entries, inserted before its COMMIT

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            # Used from the loop and from the writer thread, never from both at once.
            db = sqlite3.connect(
                self._path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")  # per connection: the commit is on disk when it returns
            self._db = db
        return self._db

    def open(self) -> None:
        """Connect (in the writer thread: opening may wait for another process's lock)."""
        self._connect()

    def begin(self, *, wait: bool = True) -> bool:
        """`BEGIN IMMEDIATE`; with `wait=False`, False at once if another connection holds the write lock."""
        db = self._connect()
        if wait:
            db.execute("BEGIN IMMEDIATE")
            return True
        db.execute("PRAGMA busy_timeout = 0")
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode == sqlite3.SQLITE_BUSY:
                return False
            raise
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        return True

    def apply(self, batch: Sequence[_Op]) -> list[tuple[bool, Any]]:
        """Every request of the batch, in order, inside the open transaction; rolls back if one raises."""
        db = self._connect()
        now = datetime.now(UTC)
        self._audits = []
        try:
            outcomes = [self._apply(db, op, now) for op in batch]
            # Audit entries go in last, in batch order: per resource that is still fence order.
            db.executemany(self._sql.sql["audit_insert"][0], self._audits)
        except BaseException:
            self.rollback()
            raise
        return outcomes

    def commit(self) -> None:
        """`COMMIT`: returns once the batch is on disk; rolls back and raises if it is not."""
        try:
            self._connect().execute("COMMIT")
        except BaseException:
            self.rollback()
            raise

    def rollback(self) -> None:
        if self._db is not None and self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def write(self, batch: Sequence[_Op]) -> list[tuple[bool, Any]]:
        """The whole batch in one transaction on the calling thread; raises (rolled back) if not committed."""
        self.begin()
        outcomes = self.apply(batch)
        self.commit()
        return outcomes

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _audit(
        self, db: sqlite3.Connection, op: _Op, now: datetime, *, key: str, status: int, outcome: str
    ) -> None:
        mark = op.token if outcome in FENCE_PASSED else None
        method = op.kind.upper()
        params = audit_params(
            op.caller,
            method=method,
            key=key,
            resource=op.resource,
            token=op.token,
            mark=mark,
            status=status,
            outcome=outcome,
            now=now,
        )
        self._audits.append(self._sql.bind("audit_insert", params)[1])

    def _replayed(self, db: sqlite3.Connection, op: _Op, now: datetime) -> ObjectMeta | None:
        caller = op.caller
        if caller.idempotency_key is None or op.kind == "get":
            return None
        params = {"client": caller.client, "idempotency_key": caller.idempotency_key}
        row = self._sql.run(db, "idempotency_select", params)
        if row is None:
            return None
        meta = replay(caller, dict(zip(IDEMPOTENCY_COLUMNS, row, strict=True)))
        status = status_of(op.kind.upper(), meta)
        self._audit(db, op, now, key=meta.key, status=status, outcome=REPLAYED)
        return meta

    def _accepted(self, db: sqlite3.Connection, op: _Op, now: datetime, meta: ObjectMeta) -> None:
        self._audit(db, op, now, key=op.key, status=status_of(op.kind.upper(), meta), outcome=ACCEPTED)
        if op.caller.idempotency_key is not None:
            self._sql.run(db, "idempotency_insert", idempotency_params(op.caller, meta, now=now))

    def _missing(self, db: sqlite3.Connection, op: _Op, now: datetime) -> tuple[bool, Any]:
        # The raised mark still commits: a fenced read or delete of a missing key fences too.
        self._audit(db, op, now, key=op.key, status=404, outcome=NOT_FOUND)
        return False, ObjectNotFound(f"no object under key {op.key!r}", key=op.key, audited=True)

    def fence(
        self, db: sqlite3.Connection, resource: str, token: int, now: datetime
    ) -> StaleTokenError | None:
        """Raise the mark of `resource` to `token` in the open transaction, or the refusal if it is higher."""
        fenced = self._sql.run(db, "fence_upsert", {"resource": resource, "token": token, "updated_at": now})
        if fenced is not None:
            return None
        highest = self._sql.run(db, "mark_select", {"resource": resource})
        assert highest is not None  # the upsert found a row it would not raise
        return stale_token(resource, token, highest[0])

    def _apply(self, db: sqlite3.Connection, op: _Op, now: datetime) -> tuple[bool, Any]:
        if op.kind == "refusals":
            self._audits.extend(
                self._sql.bind("audit_insert", refused_params(entry))[1] for entry in op.refusals
            )
            return True, None
        try:
            replayed = self._replayed(db, op, now)
        except IdempotencyKeyReused as exc:
            return False, exc
        if replayed is not None:
            return True, replayed
        refused = self.fence(db, op.resource, op.token, now)
        if refused is not None:
            return False, refused
        if op.kind == "put":
            params = object_params(op.key, op.data, resource=op.resource, token=op.token, now=now)
            row = self._sql.run(db, "object_upsert", params)
            assert row is not None
            meta = dict(zip(META_COLUMNS, row, strict=True))
            accepted = ObjectMeta(**meta, created=meta["version"] == 1)
            self._accepted(db, op, now, accepted)
            return True, accepted
        if op.kind == "delete":
            row = self._sql.run(db, "object_delete", {"key": op.key})
            if row is None:
                return self._missing(db, op, now)
            version, size, digest = row
            deleted = ObjectMeta(
                key=op.key, resource=op.resource, token=op.token, version=version, size=size, digest=digest
            )
            self._accepted(db, op, now, deleted)
            return True, deleted
        row = self._sql.run(db, "object_select", {"key": op.key})
        if row is None:
            return self._missing(db, op, now)
        found = dict(zip(OBJECT_COLUMNS, row, strict=True))
        meta_values = {name: found[name] for name in META_COLUMNS}
        self._audit(db, op, now, key=op.key, status=200, outcome=ACCEPTED)
        return True, ObjectData(meta=ObjectMeta(**meta_values), data=found["data"])


def _inline(batch: Sequence[_Op]) -> bool:
    """Whether the batch's statements may run on the loop: writes of small bodies and refusals only."""
    size = 0
    for op in batch:
        if op.kind not in ("put", "refusals"):
            return False
        size += len(op.data)
    return size <= INLINE_BYTES


class GroupCommitStore:
    """`ObjectStore` for SQLite that batches fenced operations; `await start()`, then `aclose()`."""

    writer_type: type[BatchWriter] = BatchWriter  # the thread's side; `bench.fenceoff` puts a yardstick here

    def __init__(
        self,
        store: SqlObjectStore,
        *,
        path: str,
        max_batch: int = DEFAULT_MAX_BATCH,
        busy_timeout: float = SQLITE_BUSY_TIMEOUT,
    ) -> None:
        self._store = store
        self._writer = self.writer_type(path, busy_timeout=busy_timeout)
        self._max_batch = max(1, max_batch)
        self._queue: asyncio.Queue[_Op | None] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fencegate-sqlite-writer")
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.batches = 0  # committed batches (tests read it to see that batching happened)

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._writer.open)
        self._task = asyncio.create_task(self._run(), name="fencegate-group-commit")

    async def aclose(self) -> None:
        """Refuse new requests, commit the queued ones, stop the writer and its thread."""
        self._closing = True
        if self._task is not None:
            self._queue.put_nowait(None)
            await self._task
            self._task = None
        await asyncio.get_running_loop().run_in_executor(self._executor, self._writer.close)
        self._executor.shutdown(wait=True)

    async def _submit(self, op: _Op) -> Any:
        if self._closing or self._task is None or self._task.done():
            raise StorageUnavailable(
                "the store is not accepting writes (shutting down); retry on another gateway"
            )
        self._queue.put_nowait(op)
        return await op.future

    async def _commit(self, batch: list[_Op]) -> list[tuple[bool, Any]]:
        """Apply the batch on the loop and commit in the thread, or all of it in the thread."""
        loop = asyncio.get_running_loop()
        writer = self._writer
        if _inline(batch) and writer.begin(wait=False):
            outcomes = writer.apply(batch)
            await loop.run_in_executor(self._executor, writer.commit)
            return outcomes
        return await loop.run_in_executor(self._executor, writer.write, batch)

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            if first is None:
                return
            batch, stop = [first], False
            while len(batch) < self._max_batch and not self._queue.empty():
                op = self._queue.get_nowait()
                if op is None:
                    stop = True
                    break
                batch.append(op)
            try:
                outcomes = await self._commit(batch)
            except (sqlite3.Error, OSError, StorageError) as exc:
                self._fail(batch, exc)
            except Exception as exc:  # the writer must outlive any one batch; its callers get 503
                log.exception("group commit of %d requests failed", len(batch))
                self._fail(batch, exc)
            else:
                self.batches += 1
                for op, (ok, value) in zip(batch, outcomes, strict=True):
                    self._settle(op.future, ok, value)
            if stop:
                return

    def _fail(self, batch: list[_Op], exc: BaseException) -> None:
        for op in batch:
            failure = StorageUnavailable(
                f"the batch holding this request was not committed ({type(exc).__name__}: {exc}); retry"
            )
            failure.__cause__ = exc
            self._settle(op.future, False, failure)

    @staticmethod
    def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
        if future.done():  # the caller gave up (deadline) and answered 503; the outcome stands
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    # -- ObjectStore ---------------------------------------------------------

    async def put(
        self, key: str, data: bytes, *, resource: str, token: int, caller: Caller = ANONYMOUS
    ) -> ObjectMeta:
        meta: ObjectMeta = await self._submit(_Op("put", key, resource, token, data, caller=caller))
        return meta

    async def get(
        self, key: str, *, resource: str, token: int | None, caller: Caller = ANONYMOUS
    ) -> ObjectData:
        if token is None:
            return await self._store.get(key, resource=resource, token=None)
        found: ObjectData = await self._submit(_Op("get", key, resource, token, caller=caller))
        return found

    async def delete(self, key: str, *, resource: str, token: int, caller: Caller = ANONYMOUS) -> ObjectMeta:
        meta: ObjectMeta = await self._submit(_Op("delete", key, resource, token, caller=caller))
        return meta

    async def record_refusals(self, entries: Sequence[Refused]) -> None:
        """Refusals ride along in the next batch: no fsync of their own."""
        if entries:
            await self._submit(_Op("refusals", "", "", 0, refusals=tuple(entries)))

    async def list(self, prefix: str, *, after: str, limit: int) -> list[ObjectMeta]:
        return await self._store.list(prefix, after=after, limit=limit)

    async def mark(self, resource: str) -> int:
        return await self._store.mark(resource)

    async def marks_count(self) -> int:
        return await self._store.marks_count()

    async def ping(self) -> None:
        await self._store.ping()
        if self._task is None or self._task.done():
            raise StorageUnavailable("the group-commit writer is not running; restart the gateway")
