"""Processes held to CPUs for the length of a block: the store on cores of its own, the rest on the others.

On a small machine every process of a bench shares every core, so a case's
rate pays for the store's CPU and the gateway's on the same cores. Pinning
the store apart models a deployment where the store runs on its own host.
Affinity is per thread on Linux, so each thread of each process is pinned;
threads and children started later inherit it from the one that starts them
(PostgreSQL's backends from the postmaster). A process or thread that is
gone by the time it is pinned, or restored, is skipped. On the way out every
thread of those processes, the ones started meanwhile too, gets every CPU
the bench itself had before.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path


def split_cpus() -> tuple[set[int], set[int]]:
    """The CPUs this process may use, halved: (the store's, everyone else's); the store's is the smaller."""
    cpus = sorted(os.sched_getaffinity(0))
    half = len(cpus) // 2
    return set(cpus[:half]), set(cpus[half:])


def can_pin() -> bool:
    """True where affinity can be set and there are at least two CPUs to split."""
    return hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2


def _threads(pid: int) -> list[int]:
    try:
        return [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []


@contextlib.contextmanager
def pinned(groups: Sequence[tuple[Callable[[], Iterable[int]], set[int]]]) -> Iterator[None]:
    """Each (pids, cpus) of `groups`: every thread of the processes `pids()` names on those CPUs until
    the block ends, then on every CPU this process had (`pids` is asked again: new backends, threads)."""
    everything = os.sched_getaffinity(0)
    try:
        for pids, cpus in groups:
            _set(pids(), cpus)
        yield
    finally:
        for pids, _ in groups:
            _set(pids(), everything)


def _set(pids: Iterable[int], cpus: set[int]) -> None:
    for pid in pids:
        for tid in _threads(pid):
            with contextlib.suppress(OSError):  # the thread ended meanwhile
                os.sched_setaffinity(tid, cpus)
