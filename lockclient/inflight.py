"""The acquires in flight of one `Redlock`, so that `aclose()` can end them before the connections close.

An acquire runs as a task; closing cancels each one (as `asyncio.timeout`
ends a block: every wait ends at once and the attempt's shielded undo runs)
and waits, bounded, for them to end, so their undo reaches the masters. An
acquire ended that way raises `ConfigurationError` (the Redlock is closed),
unless its caller cancelled it too: that cancellation goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from lockclient.errors import ConfigurationError

__all__ = ["InFlight"]

R = TypeVar("R")


class InFlight:
    """Tasks inside an acquire, and those of them that `stop()` cancelled."""

    def __init__(self, *, closed: str) -> None:
        self._closed = closed  # the message of an acquire that `stop()` ended
        self._running: set[asyncio.Task[object]] = set()
        self._stopping: set[asyncio.Task[object]] = set()
        self._ended: asyncio.Event | None = None

    async def run(self, call: Coroutine[Any, Any, R], *, what: str) -> R:
        """Await `call` in the current task, which `stop()` may end."""
        task = asyncio.current_task()
        if task is None:
            call.close()  # never started: no undo is owed
            raise RuntimeError(f"{what} must run in an asyncio task")
        self._running.add(task)
        try:
            return await call
        except asyncio.CancelledError:
            if task not in self._stopping:
                raise
            self._stopping.discard(task)
            if task.uncancel() > 0:  # cancelled by its caller too: that cancellation goes on
                raise
            raise ConfigurationError(self._closed) from None
        finally:
            self._running.discard(task)
            self._stopping.discard(task)
            if not self._running and self._ended is not None:
                self._ended.set()

    async def stop(self, within: float) -> None:
        """Cancel every task in flight and wait up to `within` seconds for them to end.

        An undo is bounded by the node timeout; a master that has not answered by then keeps the key
        until its TTL, as when it is unreachable."""
        if not self._running:
            return
        self._ended = asyncio.Event()
        for task in self._running:
            self._stopping.add(task)
            task.cancel()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                await self._ended.wait()
