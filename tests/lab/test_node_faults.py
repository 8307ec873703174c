"""Node faults on real redis-servers: a hung node, an empty restart, a delayed one, a lossy failover."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis
from redis.exceptions import TimeoutError as RedisTimeout

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.errors import FaultError
from fencegate.lab.faults.nodes import ReplicatedPair, crash_restart, paused
from fencegate.lab.locks import SingleLock
from tests.waiting import eventually


async def test_a_paused_node_hangs_and_answers_again_after_the_block(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    cluster = cluster_factory(ClusterSpec(redis=1))
    async with aioredis.Redis.from_url(cluster.redis_urls[0], socket_timeout=0.2) as client:
        async with paused(cluster, "redis-0"):
            with pytest.raises(RedisTimeout):
                await client.ping()
        assert await client.ping()


async def test_a_crash_restart_comes_back_empty_on_the_same_port(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    cluster = cluster_factory(ClusterSpec(redis=1))
    port = cluster.nodes["redis-0"].port
    async with aioredis.Redis.from_url(cluster.redis_urls[0]) as client:
        await client.set("lease", "c1", ex=30)
    await crash_restart(cluster, "redis-0")
    assert cluster.nodes["redis-0"].port == port
    async with aioredis.Redis.from_url(cluster.redis_urls[0]) as client:
        assert await client.exists("lease") == 0


async def test_a_delayed_restart_stays_down_for_the_given_time(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    cluster = cluster_factory(ClusterSpec(redis=1))
    outage = asyncio.create_task(crash_restart(cluster, "redis-0", down_for=3600))
    await eventually(lambda: not cluster.is_running("redis-0"), what="redis-0 going down")
    assert not outage.done()  # killed, and kept down: no restart while `down_for` lasts
    outage.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await outage
    await asyncio.to_thread(cluster.restart, "redis-0")
    await crash_restart(cluster, "redis-0", down_for=0.01)
    assert cluster.is_running("redis-0")  # back once `down_for` is over
    with pytest.raises(FaultError, match="cannot come back before it died"):
        await crash_restart(cluster, "redis-0", down_for=-1)
    assert cluster.is_running("redis-0")  # bad input changed nothing


async def test_failover_before_replication_loses_the_lock_and_a_second_client_acquires(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    cluster = cluster_factory(ClusterSpec(redis=0))
    pair = await ReplicatedPair.start(cluster)
    try:
        await lose_a_lock_in_failover(pair)
    finally:
        await pair.aclose()


async def lose_a_lock_in_failover(pair: ReplicatedPair) -> None:
    async with aioredis.Redis.from_url(pair.master.url) as client:
        await client.set("replicated", "yes")
        await client.wait(1, 2000)  # this one does reach the replica
    first, second = SingleLock(pair.url), SingleLock(pair.url)  # one address, before and after
    try:
        await pair.lag()
        lease = await first.acquire("failover", 30.0)  # acknowledged by the master only
        await pair.fail_over()
        assert pair.promoted
        other = await second.acquire("failover", 30.0)
        assert lease.until is not None
        assert time.monotonic() < lease.until  # two holders at once
        assert other.owner != lease.owner
        async with aioredis.Redis.from_url(pair.url) as client:
            assert await client.get("replicated") == b"yes"
    finally:
        await first.aclose()
        await second.aclose()
