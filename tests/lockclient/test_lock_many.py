"""`locker.lock_many([...])` on real masters: all or nothing, sorted, one token per resource.

The gateway part runs against a served gateway (SQLite storage): each
request names its own resource with that resource's lease.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway import Settings, create_app
from lockclient import (
    ConfigurationError,
    GatewayClient,
    LockLost,
    LockNotAcquired,
    MultiLease,
    Redlock,
    ResourceMismatch,
    SQLiteTokens,
)
from lockclient import sync as lockclient_sync
from tests.lockclient._recorder import Recorder
from tests.lockclient.conftest import eventually, values


async def granted_everywhere(multi: MultiLease[Any]) -> None:
    """A quorum grants; the last masters' answers may land just after."""
    await eventually(lambda: all(set(lease.nodes.values()) == {"ok"} for lease in multi.values()))


async def gone(raw: list[Redis], key: str) -> None:
    """A release returns once a quorum deleted the key; the last masters' deletes may land just after."""

    async def nowhere() -> bool:
        return await values(raw, key) == [None] * 5

    await eventually(nowhere, what=f"{key} deleted on every master")


def names(count: int) -> list[str]:
    stem = uuid.uuid4().hex[:10]
    return [f"many-{stem}-{i}" for i in range(count)]


async def test_resources_are_taken_sorted_once_each_with_a_token_each(
    urls: list[str], raw: list[Redis], tmp_path: Path
) -> None:
    a, b, c = names(3)
    async with Redlock(urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker:
        async with locker.lock_many([c, a, b, a], ttl=30.0) as multi:
            assert isinstance(multi, MultiLease)
            assert list(multi) == [a, b, c]
            await granted_everywhere(multi)
            assert multi[a].granted_at <= multi[b].drawn_at  # one after the other, in the canonical order
            assert multi[b].granted_at <= multi[c].drawn_at
            tokens = [multi[r].token for r in (a, b, c)]  # each from its resource's own sequence
            assert multi.tokens == dict(zip((a, b, c), tokens, strict=True))
            for resource in (a, b, c):
                assert await values(raw, locker.key(resource)) == [multi[resource].value.encode()] * 5
            assert 0 < multi.remaining() <= 30.0
            assert repr(multi).startswith(f"<MultiLease {{{a!r}: token={tokens[0]}, ")
        for resource in (a, b, c):  # released together
            await gone(raw, locker.key(resource))
        async with locker.lock_many([a, b, c], ttl=30.0) as again:
            assert all(
                again.tokens[r] > multi.tokens[r] for r in (a, b, c)
            )  # tokens per resource keep increasing


async def test_all_or_nothing_when_one_resource_is_held_elsewhere(urls: list[str], raw: list[Redis]) -> None:
    a, b, c = names(3)
    async with Redlock(urls) as other, Redlock(urls) as locker:
        blocker = await other.acquire(b, ttl=30.0)
        with pytest.raises(LockNotAcquired) as caught:
            async with locker.lock_many([a, b, c], ttl=30.0, timeout=0.5):
                pytest.fail("granted while one resource is held elsewhere")
        assert caught.value.resource == b
        assert any("the 1 lease(s) taken were released" in note for note in caught.value.__notes__)
        await gone(raw, locker.key(a))  # nothing of ours left anywhere; the other holder's lock untouched
        await gone(raw, locker.key(c))
        assert await values(raw, locker.key(b)) == [blocker.value.encode()] * 5
        with pytest.raises(LockNotAcquired):
            await locker.acquire_many([a, b, c], blocking=False)
        await gone(raw, locker.key(a))
        await other.release(blocker)


async def test_two_callers_with_overlapping_sets_in_opposite_orders_both_finish(urls: list[str]) -> None:
    shared = names(4)
    mine, theirs = shared[:3], shared[1:][::-1]  # overlap on two resources, given in opposite orders
    done: list[str] = []

    async def worker(who: str, resources: list[str], rounds: int) -> None:
        async with Redlock(urls) as locker:
            for _ in range(rounds):
                async with locker.lock_many(resources, ttl=10.0) as multi:
                    assert set(multi) == set(resources)
                    await asyncio.sleep(0)  # let the other caller run while everything is held
            done.append(who)

    third = [shared[3], shared[0]]  # overlaps both, in yet another order
    async with asyncio.timeout(60):  # a deadlock would hang here; 20 rounds take well under a second
        await asyncio.gather(
            worker("mine", mine, 20), worker("theirs", theirs, 20), worker("third", third, 20)
        )
    assert sorted(done) == ["mine", "theirs", "third"]


async def test_a_lease_that_ran_out_while_a_later_one_was_waited_for_fails_the_group(
    urls: list[str], raw: list[Redis]
) -> None:
    a, b = names(2)
    recorder = Recorder()
    async with Redlock(urls) as other, Redlock(urls, observer=recorder) as locker:
        blocker = await other.acquire(b, ttl=30.0)
        group = asyncio.create_task(locker.acquire_many([a, b], ttl=0.5, timeout=30.0))

        async def a_expired_on_every_master() -> bool:
            return await values(raw, locker.key(a)) == [None] * 5

        await eventually(
            lambda: [e["resource"] for e in recorder.named("acquired")] == [a]
        )  # b is waited for
        await eventually(a_expired_on_every_master)  # a's 0.5 s ran out
        assert not group.done()
        await other.release(blocker)
        with pytest.raises(LockNotAcquired, match=f"the lease on {a!r} ran out") as caught:
            await group
        assert caught.value.resource == a
        await gone(raw, locker.key(b))  # b was taken, then released


async def test_extend_and_release_act_on_every_lease(urls: list[str], raw: list[Redis]) -> None:
    resources = names(3)
    async with Redlock(urls) as locker, Redlock(urls) as operator:
        multi = await locker.acquire_many(resources, ttl=5.0)
        await granted_everywhere(multi)
        before = {r: multi[r].deadline for r in resources}
        assert await locker.extend_many(multi, ttl=30.0) is multi
        assert all(multi[r].deadline > before[r] and multi[r].extensions == 1 for r in resources)
        for resource in resources:
            pttl = await raw[0].pttl(locker.key(resource))
            assert pttl > 5_000  # the extension reached the master
        await operator.force_unlock(resources[1], confirm=True)
        with pytest.raises(LockLost) as lost:
            await locker.extend_many(multi)
        assert lost.value.resource == resources[1]
        assert multi.lost
        with pytest.raises(LockLost):
            multi.check()
        with pytest.raises(LockLost) as at_release:
            await locker.release_many(multi)  # the two left are released, the lost one is reported
        assert at_release.value.resource == resources[1]
        for resource in resources:
            await gone(raw, locker.key(resource))


async def test_leaving_the_block_after_a_loss_raises_and_releases_the_rest(
    urls: list[str], raw: list[Redis]
) -> None:
    a, b = names(2)
    async with Redlock(urls) as locker, Redlock(urls) as operator:

        async def lose_b_inside_the_block() -> None:
            async with locker.lock_many([a, b], ttl=3.0, auto_extend=True) as multi:
                await operator.force_unlock(b, confirm=True)
                await multi[b].wait_lost()  # the watchdog's next renewal proves it

        with pytest.raises(LockLost, match=f"the lease on {b!r}"):
            await lose_b_inside_the_block()
        await gone(raw, locker.key(a))


async def test_bad_resource_lists_are_refused(urls: list[str]) -> None:
    async with Redlock(urls) as locker:
        with pytest.raises(ConfigurationError, match="list of resource names"):
            await locker.acquire_many("abc")
        with pytest.raises(ConfigurationError, match="one or more"):
            await locker.acquire_many([])
        with pytest.raises(ConfigurationError, match="non-empty"):
            await locker.acquire_many(["a", ""])
        with pytest.raises(ConfigurationError, match="timeout"):
            await locker.acquire_many(["a"], timeout=-1)


async def test_each_request_to_the_gateway_names_its_own_resource(
    urls: list[str], aiohttp_client: Any, tmp_path: Path
) -> None:
    a, b = names(2)
    client = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw")))
    async with (
        GatewayClient(str(client.server.make_url(""))) as gateway,
        Redlock(urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker,
        locker.lock_many([a, b], ttl=30.0) as multi,
    ):
        wrote_a = await gateway.put(f"{a}/x", b"A", lease=multi[a])
        wrote_b = await gateway.put(f"{b}/x", b"B", lease=multi[b])
        assert (wrote_a.resource, wrote_a.token) == (a, multi[a].token)
        assert (wrote_b.resource, wrote_b.token) == (b, multi[b].token)
        assert await gateway.fence(a) == multi[a].token
        assert await gateway.fence(b) == multi[b].token
        with pytest.raises(ResourceMismatch):  # a's key under b's lease: refused, nothing changed
            await gateway.put(f"{a}/x", b"wrong", lease=multi[b])
        assert (await gateway.get(f"{a}/x")).data == b"A"


def test_the_sync_facade_takes_and_releases_a_group(urls: list[str]) -> None:
    a, b = names(2)
    with lockclient_sync.Redlock(urls) as locker, lockclient_sync.Redlock(urls) as other:
        with locker.lock_many([b, a], ttl=10.0) as multi:
            assert list(multi) == [a, b]
            with pytest.raises(LockNotAcquired):
                other.acquire_many([a, b], blocking=False)
            assert locker.extend_many(multi) is multi
            assert locker.inspect(a).held is True
        with pytest.raises(ConfigurationError, match="list of resource names"):
            locker.acquire_many(a)
        group = other.acquire_many([a, b], blocking=False)  # free again
        other.release_many(group)
