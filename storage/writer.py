"""One group-commit batch on one sqlite3 connection: the statements, in order, in one transaction.

`BatchWriter` is the SQL half of `batch.py`'s group commit; `GroupCommitStore`
decides where each part runs. The statements are the SQLAlchemy constructs of
`statements.py`, compiled once for SQLite (named parameters and their
defaults) and run on a stdlib `sqlite3` connection, so a statement costs
microseconds. `inline` says which batches are cheap enough to apply on the
event loop: writes of small bodies and refusals, nothing that reads or frees
an object of unknown size.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy.dialects import sqlite as sqlite_dialect

from storage.errors import IdempotencyKeyReused, ObjectNotFound, StaleTokenError
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
from storage.sql import object_params, stale_token
from storage.statements import IDEMPOTENCY_COLUMNS, META_COLUMNS, OBJECT_COLUMNS, Statements

_TIME_COLUMNS = ("updated_at", "at")
INLINE_BYTES = 1024 * 1024  # body bytes a batch may carry and still have its statements run on the loop


@dataclass(slots=True)
class Op:
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
    """One sqlite3 connection and a batch's statements; the loop or the writer thread, one at a time."""

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

    def apply(self, batch: Sequence[Op]) -> list[tuple[bool, Any]]:
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

    def write(self, batch: Sequence[Op]) -> list[tuple[bool, Any]]:
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
        self, db: sqlite3.Connection, op: Op, now: datetime, *, key: str, status: int, outcome: str
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

    def _replayed(self, db: sqlite3.Connection, op: Op, now: datetime) -> ObjectMeta | None:
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

    def _accepted(self, db: sqlite3.Connection, op: Op, now: datetime, meta: ObjectMeta) -> None:
        self._audit(db, op, now, key=op.key, status=status_of(op.kind.upper(), meta), outcome=ACCEPTED)
        if op.caller.idempotency_key is not None:
            self._sql.run(db, "idempotency_insert", idempotency_params(op.caller, meta, now=now))

    def _missing(self, db: sqlite3.Connection, op: Op, now: datetime) -> tuple[bool, Any]:
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

    def _apply(self, db: sqlite3.Connection, op: Op, now: datetime) -> tuple[bool, Any]:
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


def inline(batch: Sequence[Op]) -> bool:
    """Whether the batch's statements may run on the loop: writes of small bodies and refusals only."""
    size = 0
    for op in batch:
        if op.kind not in ("put", "refusals"):
            return False
        size += len(op.data)
    return size <= INLINE_BYTES


# A job for the writer thread: what to run there, and what to call on the loop with (result, error).
