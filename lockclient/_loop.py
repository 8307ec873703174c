"""An event loop on a daemon thread of its own: how the blocking facades run the async clients."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from lockclient.errors import ConfigurationError

__all__ = ["LoopThread"]

T = TypeVar("T")

CANCEL_GRACE = 5.0
"""Seconds `close()` lets cancelled in-flight calls unwind (e.g. undo a partial acquire) before `aclose()`."""


class LoopThread:
    """Runs coroutines on its loop for callers on other threads; `close()` or `stop()` ends it.

    In-flight calls are tracked so that closing cancels them (their callers get a
    `ConfigurationError` at once) instead of stopping the loop under them, which
    would leave the callers blocked for good.
    """

    def __init__(self, name: str, *, owner: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._owner = owner
        self._lock = threading.Lock()
        self._closing = False
        self._calls: set[concurrent.futures.Future[Any]] = set()  # submitted, not yet returned to the caller
        self._tasks: set[asyncio.Task[Any]] = set()  # their tasks, once running on the loop
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run `make()` on the loop and wait for its result (its exception is raised here)."""
        self._refuse_loop_thread()
        with self._lock:  # no call slips in once close() has taken its snapshot
            if self._closing:
                raise ConfigurationError(f"this {self._owner} is closed: build a new one")
            future = asyncio.run_coroutine_threadsafe(self._tracked(make()), self.loop)
            self._calls.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if self._closing:
                raise ConfigurationError(
                    f"this {self._owner} was closed while the call was in flight: it was cancelled "
                    "(a write may or may not have been applied)"
                ) from None
            raise
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt in the caller: stop the coroutine too
            raise
        finally:
            with self._lock:
                self._calls.discard(future)

    def close(self, aclose: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """A facade's `close()`: cancel the calls in flight, run `aclose()` once, then stop the loop."""
        self._refuse_loop_thread()
        with self._lock:
            if self._closing:
                return
            self._closing = True
            calls = list(self._calls)
        for call in calls:
            call.cancel()  # the caller is woken now; the task's cancellation is queued on the loop
        try:
            asyncio.run_coroutine_threadsafe(self._wind_down(aclose), self.loop).result()
        finally:
            self._stop_loop()

    def stop(self) -> None:
        """Stop the loop without closing a client (the client was never built)."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self._stop_loop()

    async def _tracked(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Record the running task, so that `close()` can wait for it to unwind."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            return await coroutine
        finally:
            self._tasks.discard(task)

    async def _wind_down(self, aclose: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """On the loop: give the cancelled calls a bounded time to finish, then close the client."""
        if self._tasks:  # each was cancelled by close() cancelling its future
            await asyncio.wait(set(self._tasks), timeout=CANCEL_GRACE)
        await aclose()

    def _refuse_loop_thread(self) -> None:
        """A blocking call from the loop's own thread would wait on itself: refuse it instead."""
        if threading.current_thread() is self._thread:
            raise ConfigurationError(
                f"a blocking {self._owner} call was made on its own loop thread (e.g. inside on_lost), "
                "where it would deadlock the client: use the async client (`.async_client`) inside "
                "callbacks, or hand the work to another thread"
            )

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
