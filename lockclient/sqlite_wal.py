"""Switching a SQLite file to WAL mode, retried while another process holds it.

WAL mode is stored in the file, so the first connection to a new database
switches it, and that switch takes the file's exclusive lock without calling
the busy handler: a second process opening the same new file at that moment
(two replicas, or two token sources, started at once) gets "database is
locked" at once, whatever its busy timeout says. So the switch is retried
with a doubling pause for as long as the busy timeout would have waited.

One helper for the SQLite token source and for storage's engine and writer
(plain `sqlite3`, no driver of its own), so both read a new file the same way.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

__all__ = ["enter_wal"]

FIRST_PAUSE = 0.001  # seconds; doubled after each busy answer
MAX_PAUSE = 0.05


def enter_wal(execute: Callable[[str], object], *, timeout: float) -> None:
    """`PRAGMA journal_mode=WAL` through `execute`, retried for up to `timeout` seconds while busy.

    The pauses block the caller's thread: they happen only while a new file is
    being switched, at start-up (storage's connect hook runs on the loop)."""
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE
    while True:
        try:
            execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, MAX_PAUSE)
