"""SIGTERM as an exception, so a command stopped by it unwinds as on Ctrl-C.

`main` installs `terminated` as the SIGTERM handler while a command runs:
every `finally` and `with` on the way out runs, and the servers the command
started are stopped by PID. `termination_held` defers it over a step that
must not be cut in half. One state for the whole process: `python -m
fencegate.cli` imports this module as every command does.

Inside an event loop, `until_terminated` makes SIGTERM cancel the run's task
instead, so each cluster's `async with` unwinds and stops what it started.
SIGINT cannot stand in for SIGTERM: a job started in the background by a
non-interactive shell (CI, nohup) ignores SIGINT.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class Terminated(BaseException):
    """SIGTERM, raised wherever the command is, so every `finally` and `with` on the way out runs: the
    servers a command started are stopped as on Ctrl-C. (A command running an event loop may take
    SIGTERM over with `loop.add_signal_handler` meanwhile.)"""


_held = 0  # how many `termination_held` blocks are running
_pending = False  # a SIGTERM arrived inside one


def terminated(_signum: int, _frame: object) -> None:
    """The SIGTERM handler: raise `Terminated` now, or when the last `termination_held` block ends."""
    global _pending
    if _held:
        _pending = True
        return
    raise Terminated


@contextlib.contextmanager
def termination_held() -> Iterator[None]:
    """Hold a SIGTERM that arrives inside the block until the block ends: for a step that must not be
    cut in half, such as a server started but not yet recorded for whoever stops the cluster."""
    global _held, _pending
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending:
            _pending = False
            raise Terminated


async def until_terminated(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` in this task; SIGTERM cancels it (`asyncio.CancelledError` once its cleanup ran)."""
    import asyncio  # here: `fencegate --help` loads no event loop

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await main
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
