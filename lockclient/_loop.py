"""An event loop on a daemon thread of its own: how the blocking facades run the async clients."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """Runs coroutines on its loop for callers on other threads; `stop()` ends it."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._closed = False

    def run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run `make()` on the loop and wait for its result (its exception is raised here)."""
        future = asyncio.run_coroutine_threadsafe(make(), self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt in the caller: stop the coroutine too
            raise

    def close(self, aclose: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """A facade's `close()`: run its client's `aclose()` once, then stop, even if that raised."""
        if self._closed:
            return
        self._closed = True
        try:
            self.run(aclose)
        finally:
            self.stop()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
