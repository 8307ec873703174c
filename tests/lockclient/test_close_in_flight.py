"""Closing a Redlock (or its token source) while calls are in flight: they end, typed, and nothing is left.

An acquire that is waiting or mid-attempt when `aclose()` runs raises the
closed Redlock's `ConfigurationError`; it grants nothing, opens no connection
after the close, and undoes what its attempt set. A hung ZooKeeper cannot
hold the close. Every await is bounded: the old hang fails the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import Redlock
from lockclient.errors import ConfigurationError, TokenSourceError
from lockclient.tokens import ZooKeeperTokens
from tests.lockclient.conftest import eventually, values

Factory = Callable[[ClusterSpec], LocalCluster]

BOUND = 10.0  # seconds any one step may take here; far above what it needs


async def clients_besides_us(raw: list[Redis]) -> int:
    """Connections to the masters other than `raw`'s own (each `CLIENT LIST` includes its caller)."""
    listed = [await client.client_list() for client in raw]
    return sum(len(clients) - 1 for clients in listed)


async def test_an_acquire_waiting_when_the_redlock_closes_ends_and_never_grants(
    cluster_factory: Factory,
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=3))
    raw = [Redis.from_url(url) for url in cluster.redis_urls]
    try:
        locker = Redlock(cluster.redis_urls, ttl=30.0)
        key = locker.key("held")
        for client in raw:  # held by someone else, who releases it only after the close
            await client.set(key, b"someone else", px=60_000)
        async with asyncio.timeout(BOUND):
            await locker.connect()
        waiter = asyncio.create_task(locker.acquire("held", timeout=None))

        async def waiting_for_the_release() -> bool:
            counts = [dict(await client.pubsub_numsub(f"{key}:released")) for client in raw]
            return all(count.get(f"{key}:released".encode(), 0) == 1 for count in counts)

        await eventually(waiting_for_the_release, what="the waiter subscribing to the release")
        async with asyncio.timeout(BOUND):
            await locker.aclose()
        for client in raw:
            await client.delete(key)  # free now: a waiter still running would take it
        async with asyncio.timeout(BOUND):
            with pytest.raises(ConfigurationError, match="closed"):
                await waiter
        assert await values(raw, key) == [None] * 3
        assert await clients_besides_us(raw) == 0  # no connection reopened after the close
    finally:
        for client in raw:
            await client.aclose()


async def test_an_attempt_cut_by_the_close_undoes_its_key_before_the_connections_close(
    cluster_factory: Factory,
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=3))
    raw = [Redis.from_url(url) for url in cluster.redis_urls]
    paused = ("redis-1", "redis-2")
    try:
        locker = Redlock(cluster.redis_urls, ttl=60.0, node_timeout=0.5)
        key = locker.key("cut")
        async with asyncio.timeout(BOUND):
            await locker.connect()
        for name in paused:
            cluster.pause(name)
        attempt = asyncio.create_task(locker.acquire("cut", timeout=None))

        async def set_on_the_live_master() -> bool:  # the attempt then waits for the paused two
            return bool(await raw[0].exists(key))

        await eventually(set_on_the_live_master, what="the attempt's SET on the live master")
        async with asyncio.timeout(BOUND):
            await locker.aclose()
        assert await raw[0].get(key) is None  # undone, not left for its 60 s TTL
        async with asyncio.timeout(BOUND):
            with pytest.raises(ConfigurationError, match="closed"):
                await attempt
        assert await clients_besides_us(raw[:1]) == 0
    finally:
        for name in paused:
            cluster.resume(name)
        for client in raw:
            await client.aclose()


async def test_a_redlock_closes_while_its_zookeeper_is_hung_and_an_acquire_waits_for_a_token(
    cluster_factory: Factory,
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=3, zookeeper=True))
    tokens = ZooKeeperTokens(cluster.zookeeper, timeout=6.0)
    locker = Redlock(cluster.redis_urls, tokens=tokens)
    try:
        async with asyncio.timeout(BOUND):
            await locker.release(await locker.acquire("zk"))  # connected to ZooKeeper
        cluster.pause("zookeeper-0")
        waiter = asyncio.create_task(locker.acquire("zk", timeout=None))
        await eventually(lambda: tokens._batch._out == 1, what="the acquire's token request out")
        async with asyncio.timeout(BOUND):
            await locker.aclose()
        async with asyncio.timeout(BOUND):
            with pytest.raises(ConfigurationError, match="closed"):
                await waiter
    finally:
        cluster.resume("zookeeper-0")


async def test_a_zookeeper_source_closes_while_zookeeper_is_hung_after_a_draw_timed_out(
    cluster_factory: Factory,
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, zookeeper=True))
    # long enough that kazoo notices the lost connection and the draw is retried while it reconnects
    tokens = ZooKeeperTokens(cluster.zookeeper, timeout=6.0)
    try:
        async with asyncio.timeout(BOUND):
            await tokens.next_token("zk")
        cluster.pause("zookeeper-0")
        async with asyncio.timeout(BOUND):
            with pytest.raises(TokenSourceError):
                await tokens.next_token("zk")
        async with asyncio.timeout(BOUND):
            await tokens.aclose()
    finally:
        cluster.resume("zookeeper-0")
