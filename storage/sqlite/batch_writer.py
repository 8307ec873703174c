"""One group-commit batch on one sqlite3 connection: the fenced unit per request, in order, one transaction.

`BatchWriter` is the SQL half of `group_commit.py`'s group commit; `GroupCommitStore`
decides where each part runs. Each request is the unit of `fenced.py`, run at
once (`run_now`) over `SqliteTx`: the statements of `statements.py` compiled
once for SQLite (named parameters and their defaults) and run on a stdlib
`sqlite3` connection, so a statement costs microseconds. `inline` says which
batches are cheap enough to apply on the event loop: writes of small bodies
and refusals, nothing that reads or frees an object of unknown size.

The writer is the only one writing, and it holds the write lock for the
whole batch: the unit's reads see every earlier request of the batch, so a
refusal wrote nothing and never needs a savepoint, and the unit's `Retry`
(a concurrent claim) cannot happen; if it did, the batch fails (503).
A batch may also carry one step of a background deletion (the idempotency expiry,
`storage/expiry.py`, or the audit archive's, `storage/archive.py`), run under a
savepoint just before its `COMMIT`: no commit, fsync or lock hand-off of its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.dialects import sqlite as sqlite_dialect

from lockclient.sqlite_wal import enter_wal
from storage.chain import Head, announce, head_of, link
from storage.errors import StorageError, StorageUnavailable
from storage.fenced import FENCED, Outcome, Policy, Retry, apply, run_now
from storage.models import Fence
from storage.queued import Op
from storage.records import refused_params
from storage.statements import Statements

_TIME_COLUMNS = ("updated_at", "at", "created_at")
Expiry = tuple[str, Mapping[str, Any]]  # one step of a background deletion: its DELETE and parameters
Expired = int | sqlite3.Error  # the rows that step deleted, or why it deleted none (the batch stands)
INLINE_BYTES = 1024 * 1024  # body bytes a batch may carry and still have its statements run on the loop


class SqliteStatements:
    """The store's statements as SQLite SQL text with named parameters and their defaults."""

    def __init__(self) -> None:
        dialect = sqlite_dialect.dialect(paramstyle="named")
        statements = Statements.for_dialect("sqlite")
        self.sql: dict[str, tuple[str, dict[str, Any]]] = {}
        for name in Statements.names():
            compiled = getattr(statements, name).compile(dialect=dialect)
            self.sql[name] = (str(compiled), dict(compiled.params))
        self.columns: dict[str, tuple[str, ...]] = {}  # each statement's result columns, from its first run
        self.bind_time: Callable[[datetime], str] = Fence.updated_at.type.dialect_impl(
            dialect
        ).bind_processor(dialect)
        self._last_time: datetime | None = None
        self._last_bound = ""

    def bind(self, name: str, params: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
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


class SqliteTx:
    """The unit's `Tx` on a sqlite3 connection; audit entries wait in `audits` for one insert per batch."""

    def __init__(self, db: sqlite3.Connection, sql: SqliteStatements) -> None:
        self._db = db
        self._sql = sql
        self.audits: list[Mapping[str, Any]] = []

    async def row(self, statement: str, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        cursor = self._db.execute(*self._sql.bind(statement, params))
        found = cursor.fetchone()
        if found is None:
            return None
        names = self._sql.columns.get(statement)
        if names is None:
            names = self._sql.columns[statement] = tuple(d[0] for d in cursor.description)
        return dict(zip(names, found, strict=True))

    async def audit(self, params: Mapping[str, Any]) -> None:
        self.audits.append(params)


class BatchWriter:
    """One sqlite3 connection and a batch's statements; the loop or the writer thread, one at a time."""

    def __init__(self, path: str, *, busy_timeout: float, policy: Policy = FENCED) -> None:
        self._path = path
        self._busy_timeout = busy_timeout
        self._policy = policy
        self._db: sqlite3.Connection | None = None
        self._sql = SqliteStatements()
        self._moved: tuple[Head, Head] | None = None  # the audit chain's head before and after the batch

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            # Used from the loop and from the writer thread, never from both at once.
            db = sqlite3.connect(
                self._path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
            )
            enter_wal(db.execute, timeout=self._busy_timeout)
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
        tx = SqliteTx(db, self._sql)
        now = datetime.now(UTC)
        try:
            outcomes = [self._apply(tx, op, now) for op in batch]
            # Audit entries go in last, in batch order: per resource that is still fence order.
            self._moved = self._append(db, tx.audits)
        except BaseException:
            self.rollback()
            raise
        return outcomes

    def _append(
        self, db: sqlite3.Connection, entries: Sequence[Mapping[str, Any]]
    ) -> tuple[Head, Head] | None:
        """Chain the batch's audit entries onto the trail (`chain.py`); the write lock is already held."""
        if not entries:
            return None
        found = db.execute(*self._sql.bind("head_select", {})).fetchone()
        before = head_of(None if found is None else {"last_id": found[0], "hash": found[1]})
        rows, after = link(before, entries)
        db.executemany(self._sql.sql["audit_insert"][0], [self._sql.bind("audit_insert", r)[1] for r in rows])
        db.execute(*self._sql.bind("head_update", {"last_id": after.last_id, "hash": after.hash}))
        return before, after

    def _apply(self, tx: SqliteTx, op: Op, now: datetime) -> tuple[bool, Any]:
        if op.request is None:
            tx.audits.extend(refused_params(entry) for entry in op.refusals)
            return True, None
        outcome: Outcome = run_now(apply(tx, op.request, now=now, policy=self._policy))
        if isinstance(outcome, Retry):  # a second writer on this file: the batch is not what it read
            raise StorageUnavailable("another process wrote to the SQLite file during a batch; retry")
        return not isinstance(outcome, StorageError), outcome

    def bind_time(self, value: datetime) -> str:
        """`value` as the SQLite text of a time parameter (a background deletion's cutoff)."""
        return self._sql.bind_time(value)

    def commit(self, *, expiry: Expiry | None = None) -> Expired:
        """`COMMIT`, after running `expiry`'s deletion in the same transaction:
        returns once the batch is on disk (what the deletion did); rolls back and raises if it is not."""
        try:
            db = self._connect()
            expired = 0 if expiry is None else _expire(db, expiry)
            db.execute("COMMIT")
        except BaseException:
            self.rollback()
            raise
        moved, self._moved = self._moved, None
        if moved is not None:
            announce(*moved)
        return expired

    def rollback(self) -> None:
        self._moved = None
        if self._db is not None and self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def write(
        self, batch: Sequence[Op], *, expiry: Expiry | None = None
    ) -> tuple[list[tuple[bool, Any]], Expired]:
        """The whole batch in one transaction on the calling thread, `expiry` deleted in it too; raises
        (rolled back) if not committed."""
        self.begin()
        outcomes = self.apply(batch)
        return outcomes, self.commit(expiry=expiry)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _expire(db: sqlite3.Connection, expiry: Expiry) -> Expired:
    """The step's rows deleted under a savepoint: a failure there is the sweep's, not the batch's."""
    db.execute("SAVEPOINT fencegate_expiry")
    try:
        deleted: int = db.execute(*expiry).rowcount
    except sqlite3.Error as exc:
        db.execute("ROLLBACK TO fencegate_expiry")
        return exc
    finally:
        db.execute("RELEASE fencegate_expiry")
    return deleted


def inline(batch: Sequence[Op]) -> bool:
    """Whether the batch's statements may run on the loop: writes of small bodies and refusals only."""
    size = 0
    for op in batch:
        if op.request is None:
            continue
        if op.request.method != "PUT":
            return False
        size += len(op.request.data)
    return size <= INLINE_BYTES
