"""Helpers for lockclient tests: unique names, raw Redis access, a controllable clock."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from fencegate.lab.cluster import LocalCluster
from tests.waiting import eventually

__all__ = ["StepClock", "eventually", "values"]


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
