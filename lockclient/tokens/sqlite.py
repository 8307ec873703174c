"""Fencing tokens from a SQLite file: the embedded default, for one machine.

Each resource has a counter row. One statement raises it and returns the new
value inside a `BEGIN IMMEDIATE` write transaction, so processes sharing the
file are serialised by SQLite's write lock (waiting up to the busy timeout)
and every token is above every token committed before it. WAL keeps readers
(`upper_bound`) off the writers' backs; `synchronous=FULL` makes each token
durable before it is handed out, so a power cut cannot make the counter go
back. The file must live on a local disk: SQLite's locking is not safe over
network file systems, and the counter is only as monotonic as the file.

Draws waiting at the same moment share one transaction (`Batcher`): one
`BEGIN IMMEDIATE`, one raise per draw in arrival order, one commit and one
fsync for all of them.

sqlite3 blocks, so each source runs its one connection on one private thread.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from lockclient.sqlite_wal import enter_wal
from lockclient.tokens._base import ClosingSource, check_resource, check_seconds, map_errors
from lockclient.tokens._batch import Batcher

A = TypeVar("A")
R = TypeVar("R")

__all__ = ["SQLiteTokens"]

DEFAULT_BUSY_TIMEOUT = 5.0  # seconds a process waits for another's write transaction to finish
MAX_BATCH = 256  # draws that share one transaction at most

SCHEMA = """
CREATE TABLE IF NOT EXISTS fencegate_tokens (
    resource TEXT PRIMARY KEY,
    value INTEGER NOT NULL CHECK (value > 0)
)
"""
NEXT = """
INSERT INTO fencegate_tokens (resource, value) VALUES (?, 1)
ON CONFLICT (resource) DO UPDATE SET value = value + 1
RETURNING value
"""
BOUND = "SELECT value FROM fencegate_tokens WHERE resource = ?"
FIX = "check that the file's directory exists and is writable, on a local disk"


class SQLiteTokens(ClosingSource):
    """Per-resource counters in a SQLite file shared by every process on the machine."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        check_seconds(busy_timeout=busy_timeout)
        self.path = os.fspath(path)
        self.busy_timeout = busy_timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lockclient-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._batch = Batcher(self._issue, max_batch=MAX_BATCH)

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            try:
                enter_wal(conn.execute, timeout=self.busy_timeout)
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute(SCHEMA)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _next(self, resources: Sequence[str]) -> list[int]:
        conn = self._open()
        conn.execute("BEGIN IMMEDIATE")
        try:
            values = [int(conn.execute(NEXT, (resource,)).fetchone()[0]) for resource in resources]
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return values

    def _bound(self, resource: str) -> int:
        row = self._open().execute(BOUND, (resource,)).fetchone()
        return 0 if row is None else int(row[0])

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def _run(self, doing: str, call: Callable[[A], R], arg: A) -> R:
        loop = asyncio.get_running_loop()
        with map_errors("sqlite", f"{doing} in {self.path}", sqlite3.Error, OSError, fix=FIX):
            return await loop.run_in_executor(self._executor, call, arg)

    async def _issue(self, resources: Sequence[str]) -> list[int]:
        return await self._run("issue a token", self._next, resources)

    async def next_token(self, resource: str) -> int:
        # a draw waits `busy_timeout` for the write lock, not one per transaction queued before its own
        doing = f"issue a token in {self.path} within {self.busy_timeout:g} s"
        with map_errors("sqlite", doing, TimeoutError, fix=FIX):
            async with asyncio.timeout(self.busy_timeout):
                return await self._batch.draw(check_resource(resource))

    async def upper_bound(self, resource: str) -> int:
        return await self._run("read the highest token", self._bound, check_resource(resource))

    async def aclose(self) -> None:
        await self._batch.aclose()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"SQLiteTokens({self.path!r})"
