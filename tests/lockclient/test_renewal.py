"""A renewal that misses its quorum is retried until the validity runs out, not declared lost at once.

Real masters are paused (SIGSTOP) or killed (-9) and restarted on private
clusters; the watchdog's events are read from an observer.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import GatewayClient, Lease, LockLost, Redlock, SQLiteTokens
from tests.lockclient._recorder import Recorder
from tests.waiting import eventually

Factory = Callable[[ClusterSpec], LocalCluster]
MAJORITY = ("redis-0", "redis-1", "redis-2")


async def start(cluster_factory: Factory) -> LocalCluster:
    return await asyncio.to_thread(cluster_factory, ClusterSpec(redis=5))


async def test_a_majority_paused_for_part_of_the_validity_keeps_the_lease(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    recorder = Recorder()
    lost: list[Lease[None]] = []
    async with Redlock(cluster.redis_urls, node_timeout=0.2, observer=recorder) as locker:
        lease = await locker.acquire("paused", ttl=9.0, auto_extend=True, on_lost=lost.append)
        for name in MAJORITY:
            cluster.pause(name)
        try:
            await eventually(
                lambda: bool(recorder.named("renewal_failed")), what="a renewal without a quorum"
            )
        finally:
            for name in MAJORITY:
                cluster.resume(name)
        failed = len(recorder.named("renewal_failed"))
        renewed = len(recorder.named("renewed"))
        await eventually(lambda: len(recorder.named("renewed")) > renewed, what="a renewal after the resume")
        assert not lost
        assert not lease.lost
        lease.check()  # still ours: the failed round did not end it
        assert lease.failed_renewals >= failed >= 1
        await locker.release(lease)
    assert not recorder.named("lost")


async def test_two_restarted_masters_do_not_cost_the_lease(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    recorder = Recorder()
    async with Redlock(cluster.redis_urls, node_timeout=0.2, observer=recorder) as locker:
        lease = await locker.acquire("restarted", ttl=6.0, auto_extend=True)
        for name in ("redis-3", "redis-4"):
            await asyncio.to_thread(cluster.kill, name)
        renewed = len(recorder.named("renewed"))
        await eventually(lambda: len(recorder.named("renewed")) > renewed, what="a renewal on three masters")
        for name in ("redis-3", "redis-4"):
            await asyncio.to_thread(cluster.restart, name)
        renewed = len(recorder.named("renewed"))
        await eventually(lambda: len(recorder.named("renewed")) > renewed, what="a renewal after restarts")
        lease.check()
        await locker.release(lease)
    assert not recorder.named("lost")


async def test_a_majority_lost_past_the_validity_is_reported_once_the_validity_is_over(
    cluster_factory: Factory, tmp_path: Path
) -> None:
    cluster = await start(cluster_factory)
    recorder = Recorder()
    lost_at: list[float] = []
    tokens = SQLiteTokens(tmp_path / "tokens.db")
    async with Redlock(cluster.redis_urls, tokens=tokens, node_timeout=0.2, observer=recorder) as locker:
        lease = await locker.acquire(
            "gone", ttl=3.0, auto_extend=True, on_lost=lambda _: lost_at.append(locker.clock())
        )
        for name in MAJORITY:
            await asyncio.to_thread(cluster.kill, name)
        async with asyncio.timeout(60):
            await lease.wait_lost()  # returns at the end of the validity; the watchdog reports it then
        await eventually(lambda: bool(lost_at), what="on_lost")
        (when,) = lost_at  # on_lost, once
        assert recorder.named("renewal_failed")  # it tried again before it gave up
        assert when >= lease.deadline  # not before the validity was over
        with pytest.raises(LockLost):
            lease.check()
        assert len(recorder.named("lost")) == 1
        # nothing listens on port 1: a request that was sent would fail as a GatewayError instead
        async with GatewayClient("http://127.0.0.1:1", timeout=5.0) as gateway:
            with pytest.raises(LockLost):
                await gateway.put("gone/object", b"late", lease=lease)


async def test_a_lease_granted_after_a_slow_token_draw_is_renewed_before_its_validity_runs_out(
    urls: list[str], tmp_path: Path
) -> None:
    """Another process holds the token file's write lock for most of the TTL (within the source's busy
    timeout): the lease starts with far less than its TTL, and the watchdog renews it in time (a third
    of the validity left, not of the TTL) instead of losing it to healthy masters."""
    ttl = 3.0
    path = tmp_path / "tokens.db"
    async with SQLiteTokens(path) as warm:
        await warm.next_token("warm-up")  # the file and its table exist
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    async with Redlock(urls, tokens=SQLiteTokens(path)) as locker:
        acquiring = asyncio.create_task(locker.acquire("slow-draw", ttl=ttl, auto_extend=True))
        await asyncio.sleep(2.4)  # the other process's transaction: most of the TTL
        other.execute("COMMIT")
        lease = await acquiring
        assert lease.remaining() < ttl / 3  # granted with less validity left than a TTL-based watchdog waits
        await eventually(lambda: lease.remaining() > ttl / 2, within=ttl, what="the watchdog's renewal")
        assert not lease.lost
        await locker.release(lease)
    other.close()
