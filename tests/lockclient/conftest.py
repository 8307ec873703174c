"""Helpers for lockclient tests: unique names, raw Redis access, a controllable clock."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest
from redis.asyncio import Redis

from lab.cluster import LocalCluster


@pytest.fixture
def resource() -> str:
    """A resource name no other test uses (the session clusters are shared)."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def urls(redis_cluster: LocalCluster) -> list[str]:
    return redis_cluster.redis_urls


@pytest.fixture
async def raw(urls: list[str]) -> AsyncIterator[list[Redis]]:
    """Plain clients on the shared masters, to look at keys behind the library's back."""
    clients = [Redis.from_url(url) for url in urls]
    yield clients
    for client in clients:
        await client.aclose()


async def values(clients: list[Redis], key: str) -> list[bytes | None]:
    """The value of `key` on every master, in order."""
    found: list[bytes | None] = []
    for client in clients:
        value = await client.get(key)
        found.append(value.encode() if isinstance(value, str) else value)
    return found


async def eventually(condition: Callable[[], bool | Awaitable[bool]], *, within: float = 10.0) -> None:
    """Wait until `condition()` holds, checking every few ms; fail after `within` seconds.

    For state outside this process (keys on servers, counters moved by a
    background task) there is no event to wait on, so this polls, under a deadline.
    """
    async with asyncio.timeout(within):
        while True:
            result = condition()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await asyncio.sleep(0.005)


class StepClock:
    """A monotonic clock that returns scripted readings, then keeps the last one.

    The Redlock attempt reads the clock before and after its fan-out; scripting
    those readings sets `elapsed` exactly while the Redis round trips stay real.
    """

    def __init__(self, *readings: float) -> None:
        self._readings: Iterator[float] = iter(readings)
        self.last = readings[0]

    def __call__(self) -> float:
        self.last = next(self._readings, self.last)
        return self.last
