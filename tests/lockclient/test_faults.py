"""Redlock under faults, on private clusters: dead and hung masters, lost majorities, waiting."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import QuorumUnavailable, Redlock, RetryPolicy
from lockclient._nodes import release_channel
from tests.closing import closing
from tests.lockclient.conftest import eventually, values

Factory = Callable[[ClusterSpec], LocalCluster]


async def start(cluster_factory: Factory, masters: int = 5) -> LocalCluster:
    return await asyncio.to_thread(cluster_factory, ClusterSpec(redis=masters))


async def test_quorum_survives_two_stopped_masters_but_not_three(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    async with Redlock(cluster.redis_urls, node_timeout=0.25) as locker:  # headroom for a loaded machine
        for name in ("redis-0", "redis-1"):
            await asyncio.to_thread(cluster.stop, name)
        lease = await locker.acquire("quorum", blocking=False)
        assert sorted(r == "ok" for r in lease.nodes.values()) == [False, False, True, True, True]
        await locker.release(lease)

        await asyncio.to_thread(cluster.stop, "redis-2")
        with pytest.raises(QuorumUnavailable, match="3 of 5 masters did not answer") as caught:
            await locker.acquire("quorum", blocking=False)
        failed = [url for url, why in caught.value.reasons.items() if why != "ok"]
        assert sorted(failed) == sorted(caught.value.unreachable)
        assert len(failed) == 3
        assert all("Error" in caught.value.reasons[url] for url in failed)
        assert caught.value.unreachable == tuple(cluster.nodes[f"redis-{i}"].url for i in range(3))


async def test_a_quorum_does_not_wait_for_hung_masters(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    async with Redlock(cluster.redis_urls, node_timeout=60.0, ttl=90.0) as locker:
        hung = [cluster.nodes[name].url for name in ("redis-3", "redis-4")]
        for name in ("redis-3", "redis-4"):
            cluster.pause(name)  # SIGSTOP: the sockets accept, nothing answers
        async with asyncio.timeout(20):  # far inside the 60 s per-node timeout
            lease = await locker.acquire("hung", blocking=False)
            await locker.release(lease)  # a quorum of deletes; the hung two get theirs in order
        assert all(lease.nodes[url].startswith("no answer yet") for url in hung)
        for name in ("redis-3", "redis-4"):
            cluster.resume(name)
        # The late SETs land and the lease says so; the DEL queued behind each removes its key.
        await eventually(lambda: all(lease.nodes[url] == "ok" for url in hung), what="the late grants")
        hung_clients = [Redis.from_url(url) for url in hung]
        async with closing(*hung_clients):
            await eventually(
                lambda: _all_gone(hung_clients, locker.key("hung")), what="the late keys released"
            )


async def _all_gone(clients: list[Redis], key: str) -> bool:
    return set(await values(clients, key)) == {None}


async def test_hung_masters_cost_one_node_timeout_when_no_quorum_answers(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    node_timeout = 0.2
    async with Redlock(cluster.redis_urls, node_timeout=node_timeout) as locker:
        hung = [cluster.nodes[f"redis-{i}"].url for i in (2, 3, 4)]
        for i in (2, 3, 4):
            cluster.pause(f"redis-{i}")
        # the hung servers never answer while paused: the attempt can end only through the node timeout
        with pytest.raises(QuorumUnavailable, match="3 of 5 masters did not answer") as caught:
            await locker.acquire("hung", blocking=False)
        assert sorted(caught.value.unreachable) == sorted(hung)
        assert all(caught.value.reasons[url] == "no answer within 200 ms" for url in hung)
        for i in (2, 3, 4):
            cluster.resume(f"redis-{i}")


async def test_a_cancelled_attempt_undoes_its_keys(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    healthy = [Redis.from_url(cluster.nodes[f"redis-{i}"].url) for i in range(2)]
    async with closing(*healthy), Redlock(cluster.redis_urls, node_timeout=1.0, ttl=30.0) as locker:
        for name in ("redis-2", "redis-3", "redis-4"):
            cluster.pause(name)
        attempt = asyncio.create_task(locker.acquire("cancelled", blocking=False))
        key = locker.key("cancelled")

        async def healthy_said_yes() -> bool:
            return None not in await values(healthy, key)

        await eventually(healthy_said_yes)
        attempt.cancel()  # ...while the hung three keep the attempt from settling
        with pytest.raises(asyncio.CancelledError):
            await attempt
        assert await values(healthy, key) == [None] * 2
        for name in ("redis-2", "redis-3", "redis-4"):
            cluster.resume(name)


async def test_watchdog_keeps_the_lease_past_its_ttl_and_reports_a_lost_majority(
    cluster_factory: Factory,
) -> None:
    cluster = await start(cluster_factory)
    lost: list[str] = []
    async with Redlock(cluster.redis_urls, node_timeout=0.2) as locker:  # a loaded CI box is slow
        lease = await locker.acquire(
            "watched", ttl=1.2, auto_extend=True, on_lost=lambda lease: lost.append(str(lease.lost_reason))
        )
        first_deadline = lease.deadline
        await eventually(lambda: lease.renewals >= 4)  # four renewals at ttl/3: well past the TTL
        assert time.monotonic() > first_deadline
        lease.check()

        renewed = lease.renewals
        await eventually(lambda: lease.renewals > renewed)  # right after a renewal, take the majority away
        renewed = lease.renewals
        deadline_when_taken = lease.deadline
        for name in ("redis-0", "redis-1", "redis-2"):
            await asyncio.to_thread(cluster.kill, name)
        async with asyncio.timeout(10):
            await lease.wait_lost()
        await eventually(lambda: bool(lost), what="on_lost")
        assert lease.renewals == renewed  # nothing was renewed without the majority
        assert lease.failed_renewals >= 1  # the failed rounds were retried, not given up at the first
        assert time.monotonic() >= deadline_when_taken  # lost when the validity ran out, not before
        assert lost == [lease.lost_reason]
        assert "while renewals failed" in str(lease.lost_reason)


async def test_a_waiter_wakes_on_the_release_message_without_polling(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    raw = [Redis.from_url(url) for url in cluster.redis_urls]
    # a fallback poll far longer than the acquire timeout: only the release message can wake the waiter
    patient = RetryPolicy(poll=60.0)
    async with (
        closing(*raw),
        Redlock(cluster.redis_urls) as holder,
        Redlock(cluster.redis_urls, retry=patient, node_timeout=0.5) as waiter,
    ):
        lease = await holder.acquire("wake", ttl=30.0)
        for client in raw:
            await client.config_resetstat()
        woke_at: list[float] = []

        async def wait() -> None:
            got = await waiter.acquire("wake", timeout=20.0)
            woke_at.append(time.monotonic())
            await waiter.release(got)

        task = asyncio.create_task(wait())
        channel = release_channel(holder.key("wake"))

        async def subscribed_everywhere() -> bool:
            return min([dict(await c.pubsub_numsub(channel))[channel.encode()] for c in raw]) > 0

        await eventually(subscribed_everywhere)
        await asyncio.sleep(0.5)  # the holder works for a while; a polling waiter would keep asking
        released_at = time.monotonic()
        await holder.release(lease)
        await task
        stats = [await client.info("commandstats") for client in raw]
        # one SET per master per attempt: the first, the one right after subscribing, the one after
        # waking, and on a loaded machine perhaps one more (a wake by the first master's message can
        # find the release not yet applied on a quorum); a waiter that polled would ask far more
        sets = [s["cmdstat_set"]["calls"] for s in stats]
        assert all(3 <= calls <= 4 for calls in sets), sets
        print(f"woke {1000 * (woke_at[0] - released_at):.1f} ms after the release")
