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


async def test_a_misspelt_acquire_option_is_refused_by_every_entry_point(
    urls: list[str], resource: str
) -> None:
    """The options are one `**options` set: a keyword it lacks is a TypeError, as for a signature,
    and never a silently ignored wait bound; nothing is locked."""
    typo = {"timout": 1.0}
    async with Redlock(urls) as locker:
        with pytest.raises(TypeError, match=r"acquire\(\) got an unexpected keyword argument 'timout'"):
            await locker.acquire(resource, **typo)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="'timout'"):
            async with locker.lock(resource, **typo):  # type: ignore[arg-type]
                pass
        with pytest.raises(TypeError, match=r"locked\(\) got an unexpected keyword argument 'timout'"):
            locker.locked(resource, **typo)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"acquire_many\(\) got an unexpected keyword argument 'timout'"):
            await locker.acquire_many([resource], **typo)  # type: ignore[arg-type]
        await locker.release(await locker.acquire(resource, blocking=False))  # nothing was left held

    def sync_entry_points() -> None:
        with locksync.Redlock(urls) as blocking:
            with pytest.raises(TypeError, match="'timout'"):
                blocking.acquire(resource, **typo)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="'timout'"), blocking.lock(resource, **typo):  # type: ignore[arg-type]
                pass
            with pytest.raises(TypeError, match="'timout'"):
                blocking.locked(resource, **typo)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="'timout'"), blocking.lock_many([resource], **typo):  # type: ignore[arg-type]
                pass

    await asyncio.to_thread(sync_entry_points)
