"""SIGTERM stops a long run the way Ctrl-C does, so the servers it started are stopped by PID.

Python's default SIGTERM ends the process where it stands: no `finally`
runs, and every redis-server, ZooKeeper and PostgreSQL a lab run or a
benchmark started outlives it. `fencegate.cli.main` turns SIGTERM into an
exception for the synchronous commands (`cluster up`, `demo`); inside an
event loop, under `until_terminated`, SIGTERM cancels the run's task
instead, so each cluster's `async with` unwinds and stops what it started.
SIGINT cannot stand in for it: a job started in the background by a
non-interactive shell (CI, nohup) ignores SIGINT.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

from fencegate.cli import TERMINATED

__all__ = ["TERMINATED", "until_terminated"]

T = TypeVar("T")


async def until_terminated(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` in this task; SIGTERM cancels it (`asyncio.CancelledError` once its cleanup ran)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await main
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
