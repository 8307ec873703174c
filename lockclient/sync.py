"""Redlock for code without an event loop: the same algorithm, run on a private loop thread.

There is one implementation, the async `lockclient.Redlock`. This facade owns
an event loop on a daemon thread, builds the async client there, and submits
each call to it, blocking the caller until it is done. Leases are the same
`Lease` objects (their watchdog, if any, keeps renewing on the loop thread
while the caller works). Reentrancy is per calling thread.

    with Redlock(masters, tokens=SQLiteTokens("tokens.db")) as locker:
        with locker.lock("invoices", ttl=10.0) as lease:
            write(lease.token)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, Generic, TypedDict, TypeVar, Unpack, overload

from lockclient import redlock
from lockclient.config import RetryPolicy
from lockclient.errors import LockLost
from lockclient.lease import Lease, TokenT
from lockclient.protocols import Clock, TokenSource

__all__ = ["Redlock", "RedlockOptions"]

T = TypeVar("T")


class RedlockOptions(TypedDict, total=False):
    """The keywords of `lockclient.Redlock` besides `tokens`; same meanings, same defaults."""

    ttl: float
    node_timeout: float
    retry: RetryPolicy
    clock: Clock
    drift_factor: float
    max_extensions: int
    watchdog_fraction: float
    reentrant: bool
    key_prefix: str


class Redlock(Generic[TokenT]):
    """Blocking twin of `lockclient.Redlock`; `close()` (or leaving `with`) stops its thread."""

    @overload
    def __init__(
        self: Redlock[int], masters: Sequence[str], *, tokens: TokenSource, **options: Unpack[RedlockOptions]
    ) -> None: ...

    @overload
    def __init__(
        self: Redlock[None], masters: Sequence[str], *, tokens: None = None, **options: Unpack[RedlockOptions]
    ) -> None: ...

    def __init__(
        self, masters: Sequence[str], *, tokens: TokenSource | None = None, **options: Unpack[RedlockOptions]
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="lockclient-sync", daemon=True)
        self._thread.start()

        async def build() -> redlock.Redlock[Any]:
            return redlock.Redlock(masters, tokens=tokens, **options)

        try:
            self._async: redlock.Redlock[TokenT] = self._run(build)
        except BaseException:
            self._stop_loop()
            raise
        self._closed = False

    def _run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        future = asyncio.run_coroutine_threadsafe(make(), self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt in the caller: stop the coroutine too
            raise

    @property
    def async_client(self) -> redlock.Redlock[TokenT]:
        """The async client doing the work (use it only through its loop)."""
        return self._async

    def acquire(
        self,
        resource: str,
        *,
        ttl: float | None = None,
        blocking: bool = True,
        timeout: float | None = None,
        auto_extend: bool = False,
        on_lost: Callable[[Lease[TokenT]], object] | None = None,
    ) -> Lease[TokenT]:
        """As `lockclient.Redlock.acquire`; the owner for reentrancy is the calling thread.

        `on_lost` runs on the loop thread: keep it short and thread-safe.
        """
        owner = ("thread", threading.get_ident())
        return self._run(
            lambda: self._async.acquire(
                resource,
                ttl=ttl,
                blocking=blocking,
                timeout=timeout,
                auto_extend=auto_extend,
                on_lost=on_lost,
                owner=owner,
            )
        )

    def release(self, lease: Lease[TokenT]) -> None:
        self._run(lambda: self._async.release(lease))

    def extend(self, lease: Lease[TokenT], *, ttl: float | None = None) -> Lease[TokenT]:
        return self._run(lambda: self._async.extend(lease, ttl=ttl))

    @contextlib.contextmanager
    def lock(
        self,
        resource: str,
        *,
        ttl: float | None = None,
        blocking: bool = True,
        timeout: float | None = None,
        auto_extend: bool = False,
        on_lost: Callable[[Lease[TokenT]], object] | None = None,
    ) -> Iterator[Lease[TokenT]]:
        """`with locker.lock(name) as lease:` with the async version's semantics on exit."""
        lease = self.acquire(
            resource, ttl=ttl, blocking=blocking, timeout=timeout, auto_extend=auto_extend, on_lost=on_lost
        )
        try:
            yield lease
        except BaseException:
            with contextlib.suppress(LockLost):
                self.release(lease)
            raise
        if not lease.lost:
            self.release(lease)
            return
        with contextlib.suppress(LockLost):
            self.release(lease)
        if lease.holds == 0:
            raise LockLost(
                f"the lease on {lease.resource!r} (token {lease.token}) was lost inside the block: "
                f"{lease.lost_reason}",
                resource=lease.resource,
                token=lease.token,
            )

    def close(self) -> None:
        """Close the async client (pools, subscribers, token source), then stop the thread."""
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._async.aclose)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Redlock[TokenT]:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
