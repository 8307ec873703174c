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

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, Generic, ParamSpec, TypeVar, Unpack, overload

from lockclient import redlock
from lockclient._loop import LoopThread
from lockclient.errors import ConfigurationError
from lockclient.lease import Lease, TokenT
from lockclient.multi import MultiLease
from lockclient.options import AcquireOptions, RedlockOptions, check_options
from lockclient.protocols import TokenSource
from lockclient.state import ForcedUnlock, LockState
from lockclient.sync_http import GatewayClient, GatewayOptions

__all__ = ["GatewayClient", "GatewayOptions", "Redlock", "RedlockOptions"]

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


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

    @overload
    def __init__(
        self: Redlock[int | None],
        masters: Sequence[str],
        *,
        tokens: TokenSource | None,
        **options: Unpack[RedlockOptions],
    ) -> None: ...

    def __init__(
        self, masters: Sequence[str], *, tokens: TokenSource | None = None, **options: Unpack[RedlockOptions]
    ) -> None:
        self._thread = LoopThread("lockclient-sync", owner="lockclient.sync.Redlock")
        self._run = self._thread.run

        async def build() -> redlock.Redlock[Any]:
            locker = redlock.Redlock(masters, tokens=tokens, **options)
            await locker.connect()
            return locker

        try:
            self._async: redlock.Redlock[TokenT] = self._run(build)
        except BaseException:
            self._thread.stop()
            raise

    @staticmethod
    def _owner() -> Hashable:
        """Reentrancy in the facade is per calling thread."""
        return ("thread", threading.get_ident())

    @property
    def async_client(self) -> redlock.Redlock[TokenT]:
        """The async client doing the work (use it only through its loop)."""
        return self._async

    def acquire(self, resource: str, **options: Unpack[AcquireOptions[TokenT]]) -> Lease[TokenT]:
        """As `lockclient.Redlock.acquire`; the owner for reentrancy is the calling thread.

        `on_lost` runs on the loop thread: keep it short and thread-safe.
        """
        owner = self._owner()
        return self._run(lambda: self._async.acquire(resource, owner=owner, **options))

    def release(self, lease: Lease[TokenT]) -> None:
        self._run(lambda: self._async.release(lease))

    def extend(self, lease: Lease[TokenT], *, ttl: float | None = None) -> Lease[TokenT]:
        return self._run(lambda: self._async.extend(lease, ttl=ttl))

    @contextlib.contextmanager
    def lock(self, resource: str, **options: Unpack[AcquireOptions[TokenT]]) -> Iterator[Lease[TokenT]]:
        """`with locker.lock(name) as lease:` the async `lock()` itself, entered and left on the loop."""
        block = self._async.lock(resource, owner=self._owner(), **options)
        with self._entered(block) as lease:
            yield lease

    def locked(
        self, resource: str, **options: Unpack[AcquireOptions[TokenT]]
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Decorate a plain function so every call runs under a lease on `resource` (see `lock()`)."""

        check_options(options, where="locked")

        def decorate(function: Callable[P, R]) -> Callable[P, R]:
            if inspect.iscoroutinefunction(function):
                raise ConfigurationError(
                    f"{function.__qualname__!r} is a coroutine function: decorate it with the async "
                    "lockclient.Redlock.locked"
                )

            @functools.wraps(function)
            def under_lease(*args: P.args, **kwargs: P.kwargs) -> R:
                with self.lock(resource, **options):
                    return function(*args, **kwargs)

            return under_lease

        return decorate

    def close(self) -> None:
        """Close the async client (pools, subscribers, token source), then stop the thread."""
        self._thread.close(self._async.aclose)

    def __enter__(self) -> Redlock[TokenT]:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- state, operators, several resources: the async calls, run on the loop ----------------

    def inspect(self, resource: str) -> LockState:
        """As `lockclient.Redlock.inspect`."""
        return self._run(lambda: self._async.inspect(resource))

    def force_unlock(self, resource: str, *, confirm: bool = False, token: int | None = None) -> ForcedUnlock:
        """As `lockclient.Redlock.force_unlock`: refused without `confirm=True`."""
        return self._run(lambda: self._async.force_unlock(resource, confirm=confirm, token=token))

    def acquire_many(
        self, resources: Iterable[str], **options: Unpack[AcquireOptions[TokenT]]
    ) -> MultiLease[TokenT]:
        """As `lockclient.Redlock.acquire_many`; the owner for reentrancy is the calling thread."""
        owner = self._owner()
        return self._run(lambda: self._async.acquire_many(resources, owner=owner, **options))

    def release_many(self, leases: MultiLease[TokenT]) -> None:
        self._run(lambda: self._async.release_many(leases))

    def extend_many(self, leases: MultiLease[TokenT], *, ttl: float | None = None) -> MultiLease[TokenT]:
        return self._run(lambda: self._async.extend_many(leases, ttl=ttl))

    @contextlib.contextmanager
    def lock_many(
        self, resources: Iterable[str], **options: Unpack[AcquireOptions[TokenT]]
    ) -> Iterator[MultiLease[TokenT]]:
        """`with locker.lock_many([a, b]) as multi:` the async `lock_many()`, entered and left on the loop."""
        block = self._async.lock_many(resources, owner=self._owner(), **options)
        with self._entered(block) as multi:
            yield multi

    @contextlib.contextmanager
    def _entered(self, block: contextlib.AbstractAsyncContextManager[T]) -> Iterator[T]:
        """Enter and leave an async context manager on the loop; the caller's exception reaches its exit."""
        value = self._run(block.__aenter__)
        try:
            yield value
        except BaseException as exc:
            # the async block releases and re-raises; it never swallows the caller's exception
            self._run(functools.partial(block.__aexit__, type(exc), exc, exc.__traceback__))
            raise
        self._run(lambda: block.__aexit__(None, None, None))
