"""Closing a Redlock lets the requests still in flight finish, so a release reaches every master."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from redis.asyncio import Redis

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import Redlock
from tests.lockclient.conftest import eventually, values

Factory = Callable[[ClusterSpec], LocalCluster]


async def test_a_release_answered_by_the_quorum_reaches_the_slow_minority_before_the_close(
    cluster_factory: Factory,
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=5))
    raw = [Redis.from_url(url) for url in cluster.redis_urls]
    slow = ("redis-3", "redis-4")
    try:
        locker = Redlock(cluster.redis_urls, node_timeout=5.0)
        await locker.connect()
        lease = await locker.acquire("closing", ttl=60.0)
        key = locker.key("closing")

        def every_set_answered() -> bool:
            # the acquire returns once a quorum answered: a SET still in flight to a master paused
            # next would wait in its connection ahead of the delete
            return all(m._link is not None and not m._link._inflight for m in locker._masters)

        await eventually(every_set_answered, what="every master's answer to the acquire")
        for name in slow:
            cluster.pause(name)
        await locker.release(lease)  # answered by the three others; two deletes still in flight
        closing = asyncio.create_task(locker.aclose())
        minority = locker._masters[3:]  # the close's own wait is what is tested

        def waiting_behind_the_deletes() -> bool:
            # each slow master's connection holds its delete and the close's PING behind it
            return all(m._link is not None and len(m._link._inflight) == 2 for m in minority)

        await eventually(waiting_behind_the_deletes, what="the close waiting for the slow masters")
        for name in slow:
            cluster.resume(name)
        await closing
        assert await values(raw, key) == [None] * 5  # without the wait, the two slow masters keep it
    finally:
        for client in raw:
            await client.aclose()
