"""Fencing the user's own tables: the call inside their transaction, and a trigger for the rest.

    async with engine.begin() as conn:
        await fence(conn, lease)          # raises StaleToken, changing nothing, if a newer token wrote
        await conn.execute(update(...))   # commits only with the mark it was checked against

`fence` (and `fenced`, its `async with` form) fences the transactions that
call it. The trigger (`install_statements`, or `fencegate sql install`)
fences every writer of one table. Both keep the marks in `fencegate_marks`
and run one statement on the mark's row. docs/own-tables.md says when to
use which.
"""

from lockclient.sql._fence import create_marks, fence, fenced
from lockclient.sql._marks import MARKS_TABLE, marks_statements
from lockclient.sql._trigger import (
    BAD_INPUT_SQLSTATE,
    MOVED_SQLSTATE,
    STALE_SQLSTATE,
    install_statements,
    uninstall_statements,
)

__all__ = [
    "BAD_INPUT_SQLSTATE",
    "MARKS_TABLE",
    "MOVED_SQLSTATE",
    "STALE_SQLSTATE",
    "create_marks",
    "fence",
    "fenced",
    "install_statements",
    "marks_statements",
    "uninstall_statements",
]
