"""`@locker.locked(resource)`: every call of the function runs under a lease, async and sync."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from lockclient import ConfigurationError, LockNotAcquired, Redlock
from lockclient import sync as locksync
from tests.lockclient.conftest import values


async def test_an_async_function_runs_under_a_lease_and_releases_it(
    urls: list[str], raw: list[Redis], resource: str
) -> None:
    async with Redlock(urls) as locker, Redlock(urls) as other:
        seen: list[list[bytes | None]] = []

        @locker.locked(resource, ttl=10.0)
        async def work(x: int) -> int:
            """Doubles x."""
            seen.append(await values(raw, locker.key(resource)))
            with pytest.raises(LockNotAcquired):  # held while the function runs
                await other.acquire(resource, blocking=False)
            return 2 * x

        assert await work(21) == 42
        assert work.__doc__ == "Doubles x."  # functools.wraps
        assert all(value is not None for value in seen[0])  # the key was on every master during the call
        assert await values(raw, locker.key(resource)) == [None] * len(urls)  # and released after
        assert list(await asyncio.gather(work(1), work(2))) == [2, 4]  # calls take turns, each its own lease


def plain() -> None:
    pass


async def test_the_wrong_kind_of_function_is_refused_when_decorated(urls: list[str], resource: str) -> None:
    async with Redlock(urls) as locker:
        with pytest.raises(ConfigurationError, match="not a coroutine function"):
            locker.locked(resource)(plain)  # type: ignore[arg-type]  # what mypy would catch, at run time


def test_a_plain_function_runs_under_a_lease_with_the_sync_facade(urls: list[str], resource: str) -> None:
    with locksync.Redlock(urls) as locker, locksync.Redlock(urls) as other:

        @locker.locked(resource, ttl=10.0)
        def work(x: int) -> int:
            with pytest.raises(LockNotAcquired):
                other.acquire(resource, blocking=False)
            return x + 1

        assert work(1) == 2
        lease = other.acquire(resource, blocking=False)  # released after the call
        other.release(lease)

        async def coroutine() -> None:
            pass

        with pytest.raises(ConfigurationError, match="coroutine function"):
            locker.locked(resource)(coroutine)
