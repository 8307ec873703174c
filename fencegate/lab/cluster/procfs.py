"""What /proc says about a server's process: alive, which binary it runs, its descendants, its log.

The cluster signals PIDs it recorded, possibly from another process (`fencegate cluster down`):
these reads are what keeps it from signalling a PID the kernel has since given to someone else.
"""

from __future__ import annotations

import os
from pathlib import Path


def tail(path: str, lines: int = 20) -> str:
    """The last `lines` of a server's log, for an error that says why it did not start."""
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def alive(pid: int) -> bool:
    """True while `pid` exists and is neither a zombie nor dead."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def runs(pid: int, binary: str) -> bool:
    """True if `pid` is alive and still runs `binary` (guards against PID reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    # redis-server rewrites its title to "path host:port", so compare the first word's name
    first = cmdline[0].decode(errors="replace").split(" ")[0] if cmdline else ""
    return alive(pid) and os.path.basename(first) == os.path.basename(binary)


def descendants(root: int) -> list[int]:
    """Every live descendant of `root`: PostgreSQL backends run in sessions of their own,
    so a signal to the postmaster's group would miss them."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found
