"""Space of deleted rows given back: SQLite's incremental vacuum, in small steps.

A new SQLite store is created with `auto_vacuum=INCREMENTAL` (`engine.py`
sets it on every connection; it takes effect only on a file without tables):
pages freed by deletes and overwrites go to the file's free list, and
`reclaim` moves `VACUUM_STEP` of them at a time to the end of the file and
truncates it, one short write transaction each (`BEGIN IMMEDIATE`, so it
waits its turn behind the writer), so a fenced write waits for at most one
step. A store created before fencegate set it keeps its free pages for reuse
but never shrinks: `incremental_vacuum` does nothing there until the one-time
`VACUUM` docs/operations.md gives (`auto_vacuum_mode` tells which).

The pragma frees one page per step of its statement, and Python's `execute`
steps a statement without columns once; `executescript` steps each statement
to its end, so a step runs as a three-statement script on a stdlib
connection of its own, in a worker thread (never on the event loop).

PostgreSQL reclaims space with autovacuum; the write-heavy tables get their
thresholds at creation (schema step 6), nothing runs here.
"""

from __future__ import annotations

import asyncio
import sqlite3

from storage.engine import SQLITE_BUSY_TIMEOUT
from storage.errors import map_storage_errors

VACUUM_STEP = 256  # pages (1 MiB at 4 KiB) moved and truncated per transaction
INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL


def _pragma(db: sqlite3.Connection, name: str) -> int:
    value: int = db.execute(f"PRAGMA {name}").fetchone()[0]
    return value


def _reclaim(path: str, step: int) -> int:
    db = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT, isolation_level=None)
    try:
        if _pragma(db, "auto_vacuum") != INCREMENTAL:
            return 0
        freed = 0
        while (before := _pragma(db, "freelist_count")) > 0:
            db.executescript(f"BEGIN IMMEDIATE; PRAGMA incremental_vacuum({int(step)}); COMMIT;")
            after = _pragma(db, "freelist_count")
            if after >= before:  # another writer freed pages as fast: the next sweep goes on
                break
            freed += before - after
        return freed
    finally:
        db.close()


def auto_vacuum_mode(path: str) -> int:
    """SQLite's `PRAGMA auto_vacuum` of the file at `path`: 0 none, 1 full, 2 incremental."""
    with map_storage_errors("auto_vacuum check", drivers=(sqlite3.Error,)):
        db = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT)
        try:
            return _pragma(db, "auto_vacuum")
        finally:
            db.close()


async def reclaim(path: str, *, step: int = VACUUM_STEP) -> int:
    """Give the free pages of the SQLite file at `path` back to the file system, `step` per
    transaction; the pages freed (0 on a file without incremental auto_vacuum)."""
    with map_storage_errors("incremental vacuum", drivers=(sqlite3.Error,)):
        return await asyncio.to_thread(_reclaim, path, step)
