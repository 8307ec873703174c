"""Waiting on a condition under a deadline: the one way tests wait for state they cannot await.

For state outside the test's control flow (keys on servers, a process that is
shutting down, rows written by a background task) there is no event to wait
on, so these poll every few ms and fail, naming what did not happen, once the
deadline passes. They never assert how fast anything was.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

POLL = 0.005


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]], *, within: float = 10.0, what: str = "the condition"
) -> None:
    """Wait until `condition()` (plain or awaitable) holds; fail after `within` seconds."""
    try:
        async with asyncio.timeout(within):
            while True:
                result = condition()
                if inspect.isawaitable(result):
                    result = await result
                if result:
                    return
                await asyncio.sleep(POLL)
    except TimeoutError:
        raise AssertionError(f"{what} did not happen within {within} s") from None


def eventually_sync(
    condition: Callable[[], bool], *, within: float = 10.0, what: str = "the condition"
) -> None:
    """`eventually` for code without an event loop."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not happen within {within} s")
        time.sleep(POLL)
