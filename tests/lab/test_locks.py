"""The lab-only lock designs on real redis: they exclude while healthy and fail as the seed says."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.locks import (
    CLOCK_DRIFT_FACTOR,
    CLOCK_DRIFT_FLOOR,
    SetnxGetsetLock,
    SingleLock,
    lock_key,
)
from lockclient.errors import LockNotAcquired
from tests.closing import closing
from tests.waiting import eventually


def resource() -> str:
    return f"test-locks-{uuid.uuid4().hex[:8]}"


async def test_single_lock_excludes_and_releases(redis_cluster: LocalCluster) -> None:
    url, name = redis_cluster.redis_urls[0], resource()
    first, second = SingleLock(url), SingleLock(url)
    async with closing(first, second):
        before = time.monotonic()
        lease = await first.acquire(name, 5.0)
        after = time.monotonic()
        assert lease.until is not None
        # valid for the TTL from the moment the SET was sent, less the drift allowance
        drift = 5.0 * CLOCK_DRIFT_FACTOR + CLOCK_DRIFT_FLOOR
        assert before + 5.0 - drift <= lease.until <= after + 5.0 - drift
        with pytest.raises(LockNotAcquired, match="held by another owner"):
            await second.acquire(name, 5.0)
        assert await first.release(lease)
        assert (await second.acquire(name, 5.0)).owner != lease.owner


async def test_single_lock_release_after_expiry_leaves_the_new_holders_key(
    redis_cluster: LocalCluster,
) -> None:
    url, name = redis_cluster.redis_urls[0], resource()
    first, second = SingleLock(url), SingleLock(url)
    async with closing(first, second):
        old = await first.acquire(name, 0.05)
        taken = []

        async def second_holds() -> bool:  # the key expires in redis after 50 ms
            try:
                taken.append(await second.acquire(name, 5.0))
            except LockNotAcquired:
                return False
            return True

        await eventually(second_holds, within=5, what="the second client's lease")
        new = taken[0]
        assert not await first.release(old)
        async with aioredis.Redis.from_url(url) as raw:
            assert (await raw.get(lock_key(name))) == new.owner.encode()


async def test_setnx_getset_takes_over_only_an_expired_lock(redis_cluster: LocalCluster) -> None:
    url, name = redis_cluster.redis_urls[1], resource()
    now = [1_000_000.0]
    first, second = SetnxGetsetLock(url, wall=lambda: now[0]), SetnxGetsetLock(url, wall=lambda: now[0])
    async with closing(first, second):
        lease = await first.acquire(name, 10.0)
        assert lease.owner == "1000010.000000"
        with pytest.raises(LockNotAcquired, match="held until"):
            await second.acquire(name, 10.0)
        now[0] += 11  # the timestamp in the value is past: GETSET may take it over
        taken = await second.acquire(name, 10.0)
        assert taken.owner == "1000021.000000"
        assert not await first.release(lease)  # the value is no longer ours: no DEL
        assert await second.release(taken)
        async with aioredis.Redis.from_url(url) as raw:
            assert await raw.exists(lock_key(name)) == 0


async def test_setnx_getset_lets_exactly_one_of_many_take_over(redis_cluster: LocalCluster) -> None:
    url, name = redis_cluster.redis_urls[1], resource()
    async with aioredis.Redis.from_url(url) as raw:
        await raw.set(lock_key(name), f"{time.time() - 60:.6f}")  # a crashed holder's expired lock
    locks = [SetnxGetsetLock(url) for _ in range(8)]
    async with closing(*locks):
        results = await asyncio.gather(*(lock.acquire(name, 10.0) for lock in locks), return_exceptions=True)
        winners = [r for r in results if not isinstance(r, BaseException)]
        assert len(winners) == 1
        assert all(isinstance(r, LockNotAcquired) for r in results if isinstance(r, BaseException))


async def test_setnx_getset_refuses_a_key_of_another_design_and_leaves_it(
    redis_cluster: LocalCluster,
) -> None:
    url, name = redis_cluster.redis_urls[1], resource()
    single, old = SingleLock(url), SetnxGetsetLock(url)
    async with closing(single, old):
        lease = await single.acquire(name, 5.0)
        with pytest.raises(LockNotAcquired, match="not a SETNX/GETSET timestamp"):
            await old.acquire(name, 5.0)
        async with aioredis.Redis.from_url(url) as raw:
            assert (await raw.get(lock_key(name))) == lease.owner.encode()


async def test_single_lock_gives_the_key_back_when_no_validity_is_left(redis_cluster: LocalCluster) -> None:
    """A SET that returns after the TTL (here: a clock that jumps 10 s per reading) holds nothing."""
    url, name = redis_cluster.redis_urls[0], resource()
    readings = iter([0.0, 10.0])
    slow = SingleLock(url, clock=lambda: next(readings))
    async with closing(slow):
        with pytest.raises(LockNotAcquired, match="took longer than its TTL"):
            await slow.acquire(name, 5.0)
        async with aioredis.Redis.from_url(url) as raw:
            assert await raw.exists(lock_key(name)) == 0


async def test_setnx_getset_without_wall_clock_agreement_gives_two_holders(
    redis_cluster: LocalCluster,
) -> None:
    """A client whose clock runs 30 s ahead sees a valid lock as expired and takes it over."""
    url, name = redis_cluster.redis_urls[2], resource()
    honest, ahead = SetnxGetsetLock(url), SetnxGetsetLock(url, wall=lambda: time.time() + 30)
    async with closing(honest, ahead):
        first = await honest.acquire(name, 10.0)
        second = await ahead.acquire(name, 10.0)
        assert first.until is not None
        assert second.until is not None
        assert time.monotonic() < first.until  # both believe they hold the lock now


async def test_single_lock_node_restart_without_persistence_gives_two_holders(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    cluster = cluster_factory(ClusterSpec(redis=1))
    url, name = cluster.redis_urls[0], resource()
    first, second = SingleLock(url), SingleLock(url)
    async with closing(first, second):
        lease = await first.acquire(name, 30.0)
        await asyncio.to_thread(cluster.kill, "redis-0")
        await asyncio.to_thread(cluster.restart, "redis-0")
        other = await second.acquire(name, 30.0)
        assert lease.until is not None
        assert time.monotonic() < lease.until
        assert other.owner != lease.owner
