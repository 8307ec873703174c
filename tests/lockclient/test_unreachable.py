"""An unreachable majority is an outage: `QuorumUnavailable` after `RetryPolicy.unreachable`, never a
wait forever. A lock held elsewhere is still waited out until `timeout`, and `timeout` bounds the
whole acquire. Masters are killed (-9) or paused (SIGSTOP) on private
clusters.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import (
    ConfigurationError,
    LockNotAcquired,
    QuorumUnavailable,
    Redlock,
    RetryPolicy,
)
from lockclient.config import DEFAULT_UNREACHABLE

Factory = Callable[[ClusterSpec], LocalCluster]
MAJORITY = ("redis-0", "redis-1", "redis-2")


async def start(cluster_factory: Factory, spec: ClusterSpec | None = None) -> LocalCluster:
    return await asyncio.to_thread(cluster_factory, spec or ClusterSpec(redis=5))


async def test_a_killed_majority_raises_quorum_unavailable_with_default_settings(
    cluster_factory: Factory,
) -> None:
    cluster = await start(cluster_factory)
    killed = tuple(cluster.nodes[name].url for name in MAJORITY)
    async with Redlock(cluster.redis_urls) as locker:  # every setting at its default
        for name in MAJORITY:
            await asyncio.to_thread(cluster.kill, name)
        began = time.monotonic()
        async with asyncio.timeout(60):  # no acquire timeout: the outage alone must end the wait
            with pytest.raises(QuorumUnavailable) as caught:
                async with locker.lock("outage", ttl=2.0):
                    pytest.fail("granted without a quorum")
        took = time.monotonic() - began
    error = caught.value
    assert isinstance(error, LockNotAcquired)
    assert isinstance(error, TimeoutError)
    assert error.unreachable == killed
    assert all(url in str(error) for url in killed)
    assert "an outage, not contention" in str(error)
    assert "RetryPolicy(unreachable=SECONDS)" in str(error)  # the fix, if the outage is expected
    assert set(error.reasons) == set(cluster.redis_urls)
    assert took >= DEFAULT_UNREACHABLE  # it kept trying for the whole window first


async def test_a_hung_majority_is_an_outage_too(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    retry = RetryPolicy(unreachable=1.0)
    async with Redlock(cluster.redis_urls, node_timeout=0.2, retry=retry) as locker:
        for name in MAJORITY:
            cluster.pause(name)  # SIGSTOP: connections are accepted, nothing answers
        try:
            async with asyncio.timeout(60):
                with pytest.raises(QuorumUnavailable) as caught:
                    await locker.acquire("hung")
        finally:
            for name in MAJORITY:
                cluster.resume(name)
    assert caught.value.unreachable == tuple(cluster.nodes[name].url for name in MAJORITY)
    assert "no answer within 200 ms" in " ".join(caught.value.reasons.values())


async def test_a_non_blocking_acquire_says_outage_at_once(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    async with Redlock(cluster.redis_urls, retry=RetryPolicy(unreachable=60.0)) as locker:
        for name in MAJORITY:
            await asyncio.to_thread(cluster.kill, name)
        async with asyncio.timeout(30):
            with pytest.raises(QuorumUnavailable):
                await locker.acquire("once", blocking=False)


async def test_contention_is_waited_out_until_the_timeout_not_given_up_as_an_outage(
    urls: list[str], resource: str
) -> None:
    # a window of 0 gives up at the first attempt that finds no quorum possible; a held lock is not one
    async with Redlock(urls) as holder, Redlock(urls, retry=RetryPolicy(unreachable=0.0)) as waiter:
        lease = await holder.acquire(resource, ttl=30.0)
        began = time.monotonic()
        with pytest.raises(LockNotAcquired) as caught:
            await waiter.acquire(resource, timeout=1.5)
        assert not isinstance(caught.value, QuorumUnavailable)
        assert time.monotonic() - began >= 1.5  # it waited for the whole timeout
        await holder.release(lease)


async def test_an_outage_shorter_than_the_window_is_waited_out(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    async with Redlock(cluster.redis_urls, retry=RetryPolicy(unreachable=120.0)) as locker:
        for name in MAJORITY:
            await asyncio.to_thread(cluster.kill, name)
        waiting = asyncio.create_task(locker.acquire("healed", ttl=10.0))
        with pytest.raises(TimeoutError):  # still trying, not given up, while the masters are down
            await asyncio.wait_for(asyncio.shield(waiting), 1.0)
        for name in MAJORITY:
            await asyncio.to_thread(cluster.restart, name)
        async with asyncio.timeout(60):
            lease = await waiting
        assert sum(answer == "ok" for answer in lease.nodes.values()) >= 3
        await locker.release(lease)


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_a_bad_outage_window_is_refused_with_the_fix(bad: float) -> None:
    with pytest.raises(ConfigurationError, match=r"RetryPolicy\.unreachable"):
        RetryPolicy(unreachable=bad)
