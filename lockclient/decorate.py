"""`Redlock.locked`'s decorator: a coroutine function whose every call runs inside a lock's block.

The function does not see the lease, so this suits work that only needs
mutual exclusion; a fenced write needs the lease, so it takes `lock()`.
Only `async def` functions are decorated: a plain one would run outside
the block, unlocked, and return a value the caller never awaits.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, ParamSpec, TypeVar

from lockclient.errors import ConfigurationError

__all__ = ["under_lock"]

P = ParamSpec("P")
R = TypeVar("R")


def under_lock(
    lock: Callable[[], AbstractAsyncContextManager[Any]],
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """A decorator that runs each call of a coroutine function inside `async with lock():`."""

    def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        if not inspect.iscoroutinefunction(function):
            raise ConfigurationError(
                f"{getattr(function, '__qualname__', function)!r} is not a coroutine function: "
                "decorate `async def` functions, or use lockclient.sync.Redlock.locked for plain ones"
            )

        @functools.wraps(function)
        async def under_lease(*args: P.args, **kwargs: P.kwargs) -> R:
            async with lock():
                return await function(*args, **kwargs)

        return under_lease

    return decorate
