"""Space of deleted rows given back: SQLite's incremental vacuum, in small steps.

A new SQLite store is created with `auto_vacuum=INCREMENTAL` (`engine.py`
sets it on every connection; it takes effect only on a file without tables):
pages freed by deletes and overwrites go to the file's free list, and
`reclaim` moves `VACUUM_STEP` of them at a time to the end of the file and
truncates it, one short write transaction each (`BEGIN IMMEDIATE`, so it
waits its turn behind the writer), so a fenced write waits for at most one
step. A store created before fencegate set it keeps its free pages for reuse
but never shrinks: `migrate_to_incremental` turns it on once, with
`PRAGMA auto_vacuum=INCREMENTAL; VACUUM`, which rewrites the whole file: it
holds the write lock throughout and needs room for two copies of the data
(SQLite's temporary copy and the WAL it writes back through), so it first
checks the free space and refuses, changing nothing, if it is short.

The pragma frees one page per step of its statement, and Python's `execute`
steps a statement without columns once; `executescript` steps each statement
to its end, so a step runs as a three-statement script on a stdlib
connection of its own, in a worker thread (never on the event loop).

PostgreSQL reclaims space with autovacuum; the write-heavy tables get their
thresholds at creation (schema step 6), nothing runs here.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from storage.engine import SQLITE_BUSY_TIMEOUT
from storage.errors import StorageError, map_storage_errors

VACUUM_STEP = 256  # pages (1 MiB at 4 KiB) moved and truncated per transaction
INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL
FreeBytes = Callable[[str], int]  # the bytes free on the file system holding a directory


class NotEnoughSpace(StorageError, OSError):
    """The migration's rewrite would not fit on the disk; nothing was changed."""


@dataclass(frozen=True, slots=True)
class Migration:
    """What `migrate_to_incremental` did: the file's bytes before and after, and the seconds it took."""

    path: str
    bytes_before: int
    bytes_after: int
    seconds: float


def free_bytes(directory: str) -> int:
    return shutil.disk_usage(directory).free


def _temp_directory() -> str:
    """Where SQLite puts its temporary copy: $SQLITE_TMPDIR, else the usual temporary directory."""
    return os.environ.get("SQLITE_TMPDIR") or tempfile.gettempdir()


def _file_bytes(db: sqlite3.Connection) -> int:
    return _pragma(db, "page_count") * _pragma(db, "page_size")


def _check_space(path: str, size: int, free: FreeBytes) -> None:
    """Room for the temporary copy and the WAL, both as large as the file at most; `NotEnoughSpace`."""
    home, temp = str(Path(path).resolve().parent), _temp_directory()
    needs = {home: size, temp: size} if os.stat(home).st_dev != os.stat(temp).st_dev else {home: 2 * size}
    for directory, needed in needs.items():
        if (have := free(directory)) < needed:
            raise NotEnoughSpace(
                f"SQLite file {path} ({size} bytes) not migrated to incremental auto_vacuum: its rewrite "
                f"needs {needed} bytes free in {directory}, which has {have}; free space there "
                "(or point SQLITE_TMPDIR at a larger disk) and start again"
            )


def _migrate(path: str, free: FreeBytes) -> Migration | None:
    db = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT, isolation_level=None)
    try:
        if _pragma(db, "auto_vacuum") == INCREMENTAL:
            return None
        before = _file_bytes(db)
        _check_space(path, before, free)
        started = time.monotonic()
        db.executescript("PRAGMA auto_vacuum=INCREMENTAL; VACUUM;")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the rewrite's WAL back into the file, and emptied
        if _pragma(db, "auto_vacuum") != INCREMENTAL:
            raise StorageError(f"SQLite file {path}: auto_vacuum is still not incremental after its VACUUM")
        return Migration(path, before, _file_bytes(db), time.monotonic() - started)
    finally:
        db.close()


async def migrate_to_incremental(path: str, *, free: FreeBytes = free_bytes) -> Migration | None:
    """Turn on incremental auto_vacuum in the SQLite file at `path` by rewriting it (`VACUUM`, in a
    worker thread); None if it already has it. `NotEnoughSpace` (nothing changed) if the disk cannot
    hold the rewrite, as `free` tells the bytes free of a directory."""
    with map_storage_errors("auto_vacuum migration", drivers=(sqlite3.Error,)):
        return await asyncio.to_thread(_migrate, path, free)


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
