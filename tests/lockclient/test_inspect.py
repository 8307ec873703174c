"""`locker.inspect` and `locker.force_unlock` on real masters: free, held, partly held, forced free.

Kills are on private clusters; the rest shares the session's five masters.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import ConfigurationError, LockLost, LockState, Redlock, SQLiteTokens
from lockclient import sync as lockclient_sync
from lockclient.lease import Lease
from tests.lockclient.conftest import eventually, values
from tests.lockclient.test_tls import LEAST_PRIVILEGE

Factory = Callable[[ClusterSpec], LocalCluster]


async def granted_everywhere(lease: Lease[Any]) -> None:
    """A quorum grants; the last masters' answers may land just after."""
    await eventually(lambda: set(lease.nodes.values()) == {"ok"}, what="every master's grant")


async def test_a_free_lock(urls: list[str], resource: str) -> None:
    async with Redlock(urls) as locker:
        state = await locker.inspect(resource)
    assert isinstance(state, LockState)
    assert (state.held, state.holding, state.answered, state.token, state.value, state.ttl) == (
        False, 0, 5, None, None, None,
    )  # fmt: skip
    assert [m.master for m in state.masters] == urls
    assert all(m.answered and m.value is None and m.ttl is None for m in state.masters)
    assert str(state) == f"{resource}: free (quorum 3)"
    with pytest.raises(AttributeError):
        state.resource = "other"  # type: ignore[misc]  # frozen


async def test_a_held_lock_shows_its_token_value_and_ttl_on_every_master(
    urls: list[str], resource: str, tmp_path: Path
) -> None:
    async with (
        Redlock(urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker,
        locker.lock(resource, ttl=30.0) as lease,
    ):
        await granted_everywhere(lease)
        state = await locker.inspect(resource)
        assert (state.held, state.holding, state.token, state.value) == (True, 5, lease.token, lease.value)
        assert state.key == locker.key(resource)
        for master in state.masters:
            assert master.value == lease.value
            assert master.token == lease.token
            assert master.ttl is not None
            assert 0 < master.ttl <= 30.0
        assert state.ttl is not None
        assert 0 < state.ttl <= 30.0
        shown = repr(state)
        assert f"held by token {lease.token} on 5 of 5 masters (quorum 3)" in shown
        assert all(f"{url}: token {lease.token}, " in shown for url in urls)
    async with Redlock(urls) as other:
        assert (await other.inspect(resource)).held is False  # released


async def test_a_value_on_a_minority_is_not_held_and_a_foreign_value_has_no_token(
    urls: list[str], raw: list[Redis], resource: str
) -> None:
    async with Redlock(urls) as locker:
        key = locker.key(resource)
        await raw[0].set(key, "7:" + "ab" * 20, px=30_000)
        await raw[1].set(key, "not a lock value")  # no expiry, not written by a Redlock
        try:
            state = await locker.inspect(resource)
        finally:
            await raw[0].delete(key)
            await raw[1].delete(key)
    assert (state.held, state.holding) == (False, 1)
    assert (state.masters[0].token, state.masters[1].token) == (7, None)
    assert state.masters[1].ttl == math.inf
    assert "no expiry" in str(state.masters[1])


async def test_with_a_master_killed_the_lock_is_still_held_and_the_dead_master_is_named(
    cluster_factory: Factory,
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=5))
    async with Redlock(cluster.redis_urls, node_timeout=0.25) as locker:
        lease = await locker.acquire("partial", ttl=60.0)
        await granted_everywhere(lease)
        await asyncio.to_thread(cluster.kill, "redis-0")
        state = await locker.inspect("partial")
        assert (state.held, state.holding, state.answered, state.token) == (True, 4, 4, None)
        dead = cluster.nodes["redis-0"].url
        assert state.unreachable == (dead,)
        assert state.masters[0].error is not None
        assert "Error" in state.masters[0].error
        assert f"{dead}: no answer: " in repr(state)

        for name in ("redis-1", "redis-2"):
            await asyncio.to_thread(cluster.kill, name)
        state = await locker.inspect("partial")
        assert (state.held, state.holding, state.answered) == (None, 2, 2)  # 2 hold it, 3 may: unknown
        assert state.ttl is None
        assert str(state).startswith("partial: unknown: 3 of 5 masters did not answer")
        await locker.release(lease)


async def test_force_unlock_is_refused_without_confirm_and_changes_nothing(
    urls: list[str], raw: list[Redis], resource: str
) -> None:
    async with Redlock(urls) as locker, locker.lock(resource, ttl=30.0) as lease:
        await granted_everywhere(lease)
        for confirm in (False, 1, "yes"):
            with pytest.raises(ConfigurationError, match="pass confirm=True"):
                await locker.force_unlock(resource, confirm=confirm)  # type: ignore[arg-type]
        assert await values(raw, lease.key) == [lease.value.encode()] * 5


async def test_force_unlock_frees_a_held_lock_for_a_waiter_and_reports_each_master(
    urls: list[str], raw: list[Redis], resource: str, tmp_path: Path
) -> None:
    tokens = SQLiteTokens(tmp_path / "tokens.db")
    async with Redlock(urls, tokens=tokens) as holder, Redlock(urls) as operator, Redlock(urls) as waiter:
        lease = await holder.acquire(resource, ttl=60.0)
        await granted_everywhere(lease)
        waiting = asyncio.create_task(waiter.acquire(resource, ttl=10.0, timeout=50.0))
        forced = await operator.force_unlock(resource, confirm=True)
        assert (forced.deleted, forced.tokens, forced.unreachable) == (5, (lease.token,), ())
        assert all(m.value == lease.value for m in forced.masters)
        assert str(forced) == f"{resource}: deleted on 5 of 5 masters (tokens: {lease.token})"
        taken = await waiting  # the lease had 60 s left: only the forced unlock let the waiter in
        assert taken.value != lease.value
        await waiter.release(taken)
        again = await operator.force_unlock(resource, confirm=True)
        assert (again.deleted, again.tokens) == (0, ())
        with pytest.raises(LockLost):
            await holder.release(lease)


async def test_the_old_holders_release_and_extend_leave_the_new_holders_lock_alone(
    urls: list[str], raw: list[Redis], resource: str, tmp_path: Path
) -> None:
    db = tmp_path / "tokens.db"
    async with Redlock(urls, tokens=SQLiteTokens(db)) as old, Redlock(urls, tokens=SQLiteTokens(db)) as new:
        stale = await old.acquire(resource, ttl=60.0)
        await granted_everywhere(stale)
        await new.force_unlock(resource, confirm=True)
        fresh = await new.acquire(resource, ttl=60.0, blocking=False)
        await granted_everywhere(fresh)
        assert fresh.token > stale.token
        with pytest.raises(LockLost):
            await old.extend(stale)  # the old value is on no master: lost, and nothing extended
        with pytest.raises(LockLost):
            await old.release(stale)
        assert await values(raw, fresh.key) == [fresh.value.encode()] * 5
        state = await new.inspect(resource)
        assert (state.held, state.token, state.holding) == (True, fresh.token, 5)
        await new.release(fresh)


async def test_force_unlock_of_a_token_keeps_a_newer_holders_lock(
    urls: list[str], raw: list[Redis], resource: str, tmp_path: Path
) -> None:
    db = tmp_path / "tokens.db"
    async with Redlock(urls, tokens=SQLiteTokens(db)) as locker, Redlock(urls) as operator:
        stuck = await locker.acquire(resource, ttl=60.0)
        await granted_everywhere(stuck)
        seen = (await operator.inspect(resource)).token
        await locker.release(stuck)  # the stuck holder let go meanwhile, and a healthy one took over
        fresh = await locker.acquire(resource, ttl=60.0)
        await granted_everywhere(fresh)
        late = await operator.force_unlock(resource, confirm=True, token=seen)  # what inspect showed
        assert (late.deleted, late.tokens, late.kept) == (0, (), tuple(urls))
        assert str(late).endswith(f"kept on 5: another holder's, not token {seen}")
        assert await values(raw, fresh.key) == [fresh.value.encode()] * 5
        meant = await operator.force_unlock(resource, confirm=True, token=fresh.token)
        assert (meant.deleted, meant.tokens, meant.kept) == (5, (fresh.token,), ())
        with pytest.raises(ConfigurationError, match="fencing token"):
            await operator.force_unlock(resource, confirm=True, token="7")  # type: ignore[arg-type]


async def test_force_unlock_with_a_master_down_reports_it(cluster_factory: Factory) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=5))
    async with Redlock(cluster.redis_urls, node_timeout=0.25) as locker:
        await granted_everywhere(await locker.acquire("down", ttl=60.0))
        await asyncio.to_thread(cluster.kill, "redis-4")
        forced = await locker.force_unlock("down", confirm=True)
    assert (forced.deleted, forced.unreachable) == (4, (cluster.nodes["redis-4"].url,))
    assert str(forced).endswith("; 1 did not answer")


async def test_bad_calls_are_refused(urls: list[str]) -> None:
    locker = Redlock(urls)
    with pytest.raises(ConfigurationError, match="non-empty"):
        await locker.inspect("")
    await locker.aclose()
    with pytest.raises(ConfigurationError, match="closed"):
        await locker.inspect("x")
    with pytest.raises(ConfigurationError, match="closed"):
        await locker.force_unlock("x", confirm=True)


def test_the_sync_facade_inspects_and_forces(urls: list[str], resource: str) -> None:
    with lockclient_sync.Redlock(urls) as locker:
        lease = locker.acquire(resource, ttl=30.0)
        assert locker.inspect(resource).held is True
        with pytest.raises(ConfigurationError):
            locker.force_unlock(resource)
        assert locker.force_unlock(resource, confirm=True).deleted >= locker.async_client.quorum
        assert locker.inspect(resource).held is False
        with pytest.raises(LockLost):
            locker.release(lease)


async def acl(client: Redis, *args: str) -> None:
    await client.execute_command("ACL", *args)  # type: ignore[no-untyped-call]


async def test_an_operator_needs_pttl_besides_the_lock_users_rights(
    urls: list[str], raw: list[Redis], resource: str
) -> None:
    user, password = f"operator-{resource}", "operator-password"
    for client in raw:
        await acl(client, "SETUSER", user, "on", f">{password}", *LEAST_PRIVILEGE)
    try:
        logins = [url.replace("redis://", f"redis://{user}:{password}@") for url in urls]
        async with Redlock(logins, node_timeout=1.0) as locker:
            lease = await locker.acquire(resource, ttl=30.0)  # the documented lock user can lock...
            refused = await locker.inspect(resource)  # ...but not read a TTL
            assert refused.held is None
            assert all(m.error is not None and "can't run this command" in m.error for m in refused.masters)
            assert password not in repr(refused)
            for client in raw:
                await acl(client, "SETUSER", user, "+pttl")
            await granted_everywhere(lease)
            assert (await locker.inspect(resource)).held is True
            assert (await locker.force_unlock(resource, confirm=True)).deleted == 5
    finally:
        for client in raw:
            await acl(client, "DELUSER", user)
