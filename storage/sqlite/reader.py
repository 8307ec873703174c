"""Plain reads on SQLite: a thread of their own with its own sqlite3 connection, one hop per read.

Through aiosqlite a read costs a hop to the connection's thread for each
call (BEGIN, execute, fetch, COMMIT, close). Here a read is one job for the
reader thread, which runs `Statements.object_select` (compiled once, as the
writer's, `writer.SqliteStatements`) and hands the row back; reads that queued up
meanwhile are run and answered together, one wake-up of the loop for all.

The connection is in autocommit mode, so each SELECT is its own read
transaction, ended when its rows are fetched: it sees every commit before it
(WAL: beside the writer, never waiting for its lock) and never a batch that
has not committed (the writer's transaction is on its own connection). The
connection is `query_only`; a failure drops it (the next read opens another)
and is `StorageUnavailable` (503), the driver's text only on `__cause__`.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Mapping
from typing import Any

from storage.engine import SQLITE_BUSY_TIMEOUT
from storage.errors import StorageUnavailable, map_storage_errors
from storage.fenced import read_object
from storage.protocols import ObjectData
from storage.queued import settle
from storage.sqlite.batch_writer import SqliteStatements

log = logging.getLogger(__name__)

_Row = Mapping[str, Any] | None
_Job = tuple[str, "asyncio.Future[_Row]"]
_Answer = tuple["asyncio.Future[_Row]", _Row, BaseException | None]


class SqliteReader:
    """Reads objects of the SQLite file at `path` on a thread of its own; `start()`, then `aclose()`."""

    def __init__(self, path: str, *, busy_timeout: float = SQLITE_BUSY_TIMEOUT) -> None:
        self._path = path
        self._busy_timeout = busy_timeout
        self._sql = SqliteStatements()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        # A daemon thread: a loop that ends without aclose() cannot hang the process's exit (it only reads).
        self._thread = threading.Thread(
            target=self._work, args=(asyncio.get_running_loop(),), name="fencegate-sqlite-reader", daemon=True
        )
        self._thread.start()

    async def aclose(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            await asyncio.to_thread(thread.join)

    async def read(self, key: str) -> ObjectData:
        if self._thread is None:
            raise StorageUnavailable("the reader is not running (shutting down); retry on another gateway")
        future: asyncio.Future[_Row] = asyncio.get_running_loop().create_future()
        self._jobs.put((key, future))
        with map_storage_errors("get", drivers=(sqlite3.Error,)):
            row = await future
        return read_object(key, row)

    # -- the reader thread ---------------------------------------------------

    def _work(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run each read, and hand back at once every answer of the reads that queued up meanwhile."""
        db: sqlite3.Connection | None = None
        running = True
        while running:
            answers: list[_Answer] = []
            job = self._jobs.get()
            while job is not None:
                key, future = job
                try:
                    if db is None:
                        db = self._connect()
                    answers.append((future, self._select(db, key), None))
                except Exception as exc:  # noqa: BLE001 - the reader outlives any one read; the caller answers 503
                    answers.append((future, None, exc))
                    if db is not None:
                        db.close()
                        db = None
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
            else:
                running = False
            if answers:
                loop.call_soon_threadsafe(_answer, answers)
        if db is not None:
            db.close()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self._path, timeout=self._busy_timeout, isolation_level=None)
        db.execute("PRAGMA query_only = 1")  # WAL mode is the file's, set by the writer and the migration
        return db

    def _select(self, db: sqlite3.Connection, key: str) -> _Row:
        cursor = db.execute(*self._sql.bind("object_select", {"key": key}))
        rows = cursor.fetchall()  # to the end: the statement is done and its read transaction over
        if not rows:
            return None
        names = tuple(d[0] for d in cursor.description)
        return dict(zip(names, rows[0], strict=True))


def _answer(answers: list[_Answer]) -> None:
    for future, row, error in answers:
        settle(future, error is None, row if error is None else error)
