"""Redlock on the shared 5-master cluster: values, validity, release, extend, reentrancy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis

from lockclient import (
    ExtensionLimitReached,
    LockLost,
    LockNotAcquired,
    Redlock,
    RetryPolicy,
    SQLiteTokens,
    token_of,
)
from lockclient._quorum import drift
from tests.lockclient._recorder import Recorder
from tests.lockclient.conftest import StepClock, eventually, values

ONCE = RetryPolicy(attempts=1)


async def test_a_lease_is_granted_on_every_master_with_the_token_in_its_value(
    urls: list[str], raw: list[Redis], resource: str, tmp_path: Path
) -> None:
    async with Redlock(urls, tokens=SQLiteTokens(tmp_path / "t.db")) as locker:
        async with locker.lock(resource, ttl=5.0) as lease:
            assert isinstance(lease.token, int)
            assert lease.resource == resource
            # granted on a quorum; the last masters' answers may land just after the grant
            await eventually(lambda: set(lease.nodes.values()) == {"ok"}, what="every master's grant")
            held = await values(raw, locker.key(resource))
            assert held == [lease.value.encode()] * 5
            assert held[0] is not None
            assert token_of(held[0]) == lease.token
            assert len(lease.value.partition(":")[2]) == 40  # 20 random bytes
            assert 0 < lease.remaining() <= 5.0 - drift(5.0, 0.01)
        assert await values(raw, locker.key(resource)) == [None] * 5
        with pytest.raises(LockLost, match="released"):
            lease.check()


async def test_each_acquisition_gets_a_new_random_value(urls: list[str], resource: str) -> None:
    async with Redlock(urls) as locker:
        seen = set()
        for _ in range(3):
            lease = await locker.acquire(resource)
            assert lease.token is None
            seen.add(lease.value)
            await locker.release(lease)
        assert len(seen) == 3


async def test_validity_is_ttl_minus_elapsed_minus_drift(urls: list[str], resource: str) -> None:
    clock = StepClock(100.0, 100.25)  # token asked for, quorum in: the attempt "took" 250 ms
    async with Redlock(urls, clock=clock) as locker:
        lease = await locker.acquire(resource, ttl=10.0)
        assert lease.remaining() == pytest.approx(10.0 - 0.25 - (10.0 * 0.01 + 0.002))
        await locker.release(lease)


async def test_a_quorum_slower_than_the_ttl_is_refused_and_released_everywhere(
    urls: list[str], raw: list[Redis], resource: str
) -> None:
    clock = StepClock(100.0, 102.5)  # a 2 s TTL, and the attempt took 2.5 s (say, a GC pause)
    async with Redlock(urls, clock=clock) as locker:
        with pytest.raises(LockNotAcquired, match="quorum answered but") as caught:
            await locker.acquire(resource, ttl=2.0, blocking=False)
        assert set(caught.value.reasons.values()) == {"ok"}  # every master said yes...
        assert await values(raw, locker.key(resource)) == [None] * 5  # ...and was undone


async def test_validity_counts_from_before_the_token_draw(
    urls: list[str], raw: list[Redis], resource: str, tmp_path: Path
) -> None:
    """A client that stalls between drawing its token and the quorum finds its lease spent.

    Otherwise it would start a fresh lease with a token older than a holder that came
    and went during the stall, and the fence would refuse the current holder.
    """
    clock = StepClock(100.0, 103.0)  # drew its token, then stalled 3 s before the quorum answered
    async with Redlock(urls, tokens=SQLiteTokens(tmp_path / "t.db"), clock=clock) as locker:
        with pytest.raises(LockNotAcquired, match="quorum answered but"):
            await locker.acquire(resource, ttl=2.0, blocking=False)
        assert await values(raw, locker.key(resource)) == [None] * 5


async def test_not_acquired_lists_each_masters_reason(urls: list[str], resource: str) -> None:
    # A node timeout a busy machine cannot miss: every master answers, so each reason is its refusal.
    async with Redlock(urls, node_timeout=1.0) as holder, Redlock(urls, node_timeout=1.0) as other:
        lease = await holder.acquire(resource)
        with pytest.raises(LockNotAcquired) as caught:
            await other.acquire(resource, blocking=False)
        assert caught.value.resource == resource
        assert set(caught.value.reasons) == set(urls)
        reasons = caught.value.reasons.values()
        assert all(r.startswith("refused") for r in reasons), reasons
        assert isinstance(caught.value, TimeoutError)
        await holder.release(lease)


async def test_a_stale_holders_release_and_extend_leave_the_new_holders_key(
    urls: list[str], raw: list[Redis], resource: str
) -> None:
    # the old holder's clock stands still: like a paused process, it believes its lease is still valid
    async with Redlock(urls, clock=StepClock(0.0)) as old, Redlock(urls) as new:
        stale = await old.acquire(resource, ttl=0.2)

        async def expired() -> bool:
            return not any(await values(raw, old.key(resource)))

        await eventually(expired)
        current = await new.acquire(resource, ttl=5.0, timeout=5.0)
        with pytest.raises(LockLost, match=r"[345] no longer held it"):
            await old.extend(stale, ttl=60.0)
        with pytest.raises(LockLost):
            await old.release(stale)
        assert await values(raw, new.key(resource)) == [current.value.encode()] * 5
        ttls = [await client.pttl(new.key(resource)) for client in raw]
        assert all(0 < ms <= 5000 for ms in ttls)  # not stretched to 60 s by the stale extend
        await new.release(current)


async def test_extend_renews_on_every_master_and_is_bounded(
    urls: list[str], raw: list[Redis], resource: str
) -> None:
    async with Redlock(urls, max_extensions=2) as locker:
        lease = await locker.acquire(resource, ttl=1.0)
        await locker.extend(lease, ttl=30.0)
        assert all(ms > 20_000 for ms in [await c.pttl(locker.key(resource)) for c in raw])
        assert lease.remaining() > 20.0
        await locker.extend(lease, ttl=20.0)
        with pytest.raises(ExtensionLimitReached, match="limit is 2"):
            await locker.extend(lease, ttl=60.0)
        assert all(ms <= 20_000 for ms in [await c.pttl(locker.key(resource)) for c in raw])
        lease.check()  # a refused extension changes nothing
        await locker.release(lease)


async def test_leaving_the_block_after_the_lease_ran_out_raises_lock_lost(
    urls: list[str], resource: str
) -> None:
    async with Redlock(urls) as locker:
        block = locker.lock(resource, ttl=0.2)
        lease = await block.__aenter__()
        await eventually(lambda: lease.lost)  # the holder overruns its lease
        with pytest.raises(LockLost):
            lease.check()
        with pytest.raises(LockLost, match="lost inside the block"):
            await block.__aexit__(None, None, None)


async def test_an_error_in_the_block_releases_and_propagates(
    urls: list[str], raw: list[Redis], resource: str
) -> None:
    async with Redlock(urls) as locker:
        with pytest.raises(KeyError):
            async with locker.lock(resource):
                raise KeyError("boom")
        assert await values(raw, locker.key(resource)) == [None] * 5


async def test_reentrant_owner_counts_holds_and_releases_at_zero(
    urls: list[str], raw: list[Redis], resource: str
) -> None:
    async with Redlock(urls, reentrant=True) as locker:
        async with locker.lock(resource) as outer:
            async with locker.lock(resource) as inner:
                assert inner is outer
                assert outer.holds == 2

            async def stranger() -> None:
                await locker.acquire(resource, blocking=False)

            with pytest.raises(LockNotAcquired):
                await asyncio.create_task(stranger())  # another task is another owner
            assert await values(raw, locker.key(resource)) == [outer.value.encode()] * 5
        assert await values(raw, locker.key(resource)) == [None] * 5


async def test_without_reentrancy_the_same_task_cannot_take_it_twice(urls: list[str], resource: str) -> None:
    async with Redlock(urls) as locker, locker.lock(resource):
        with pytest.raises(LockNotAcquired):
            await locker.acquire(resource, blocking=False)


async def test_a_blocking_acquire_gives_up_at_its_timeout(urls: list[str], resource: str) -> None:
    async with Redlock(urls) as holder, Redlock(urls, retry=RetryPolicy(poll=0.05)) as waiter:
        lease = await holder.acquire(resource, ttl=10.0)
        with pytest.raises(LockNotAcquired, match="attempt"):
            await waiter.acquire(resource, timeout=0.3)
        await holder.release(lease)


@pytest.mark.parametrize("wait", [0.3, 1.0])
async def test_a_contended_acquire_with_a_token_source_times_out_on_the_holder_not_the_source(
    urls: list[str], resource: str, tmp_path: Path, wait: float
) -> None:
    """The wait for the holder used up the timeout: the error is the masters' answers, with reasons,
    not a token draw left no time and blamed on the source."""
    tokens = tmp_path / "tokens.db"
    async with (
        Redlock(urls, tokens=SQLiteTokens(tokens)) as holder,
        Redlock(urls, tokens=SQLiteTokens(tokens)) as waiter,
    ):
        lease = await holder.acquire(resource, ttl=30.0)
        with pytest.raises(LockNotAcquired) as caught:
            await waiter.acquire(resource, timeout=wait)
        await holder.release(lease)
    assert "token source" not in str(caught.value)
    assert set(caught.value.reasons) == set(urls)
    assert all(reason.startswith("refused") for reason in caught.value.reasons.values())


async def test_timeout_zero_is_one_attempt_whose_draw_has_the_sources_own_timeout(
    urls: list[str], resource: str, tmp_path: Path
) -> None:
    """A zero timeout left the token draw no time at all: with a source, it never succeeded. It is one
    attempt, as blocking=False; a held lock refuses it on the masters' word, not the source's."""
    tokens = tmp_path / "tokens.db"
    recorder = Recorder()
    async with (
        Redlock(urls, tokens=SQLiteTokens(tokens), observer=recorder) as locker,
        Redlock(urls, tokens=SQLiteTokens(tokens)) as other,
    ):
        lease = await locker.acquire(resource, timeout=0)
        assert lease.token >= 1
        with pytest.raises(LockNotAcquired) as caught:
            await other.acquire(resource, timeout=0.0)
        assert "token source" not in str(caught.value)
        assert all(reason.startswith("refused") for reason in caught.value.reasons.values())
        await locker.release(lease)
        group = await locker.acquire_many([f"{resource}-a", f"{resource}-b"], timeout=0)
        assert all(token >= 1 for token in group.tokens.values())
        await locker.release_many(group)
    assert [event["attempts"] for event in recorder.named("acquired")] == [1, 1, 1]


async def test_retry_attempts_bound_a_blocking_acquire(urls: list[str], resource: str) -> None:
    async with Redlock(urls) as holder, Redlock(urls, retry=RetryPolicy(attempts=3, poll=0.01)) as waiter:
        lease = await holder.acquire(resource, ttl=10.0)
        with pytest.raises(LockNotAcquired, match="after 3 attempt"):
            await waiter.acquire(resource)
        await holder.release(lease)


async def test_wait_lost_returns_when_the_validity_runs_out(urls: list[str], resource: str) -> None:
    called: list[object] = []
    async with Redlock(urls) as locker:
        lease = await locker.acquire(resource, ttl=0.3, on_lost=called.append)
        async with asyncio.timeout(5):
            await lease.wait_lost()
        assert lease.lost
        assert lease.lost_reason == "the lease's validity ran out"
        assert lease.remaining() == 0.0
        with pytest.raises(LockLost, match="validity ran out"):
            await locker.extend(lease)
        assert called == [lease]  # the failed extension told the holder, once


async def test_connect_opens_a_connection_to_every_master(urls: list[str]) -> None:
    locker = Redlock([*urls, "redis://127.0.0.1:1"])  # plus one master that is down
    try:
        answers = await locker.connect()
        assert [answers[url] for url in urls] == ["ok"] * 5
        assert answers["redis://127.0.0.1:1"].startswith("ConnectionRefusedError: cannot connect to")
    finally:
        await locker.aclose()
