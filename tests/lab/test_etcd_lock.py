"""The lab's etcd lock design on a real 3-member etcd cluster: a mutex while healthy, revisions as tokens."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import aetcd
import pytest

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.errors import LabLockError
from fencegate.lab.etcd_lock import EtcdLock, lock_prefix
from fencegate.lab.protocols import LeaseInfo
from lockclient.errors import LockNotAcquired
from lockclient.tokens.etcd import parse_endpoints
from tests.closing import closing
from tests.waiting import eventually

TTL = 1.0  # etcd grants its minimum (2 s with the helper's election timeout) for anything shorter


def resource() -> str:
    return f"test-etcd-lock-{uuid.uuid4().hex[:8]}"


def raw(cluster: LocalCluster) -> aetcd.Client:
    host, port = parse_endpoints(cluster.etcd.removeprefix("etcd://"))[0]
    return aetcd.Client(host=host, port=port)


async def held_keys(cluster: LocalCluster, name: str) -> list[tuple[bytes, int]]:
    async with raw(cluster) as client:
        found = await client.get_prefix(lock_prefix(name), sort_order="ascend", sort_target="create")
        return [(kv.key, kv.create_revision) for kv in found]


async def test_the_lock_excludes_many_clients_under_no_fault(etcd_cluster: LocalCluster) -> None:
    """Eight clients, three rounds each, a read-sleep-write on a shared counter: no increment lost."""
    name, clients = resource(), 8
    locks = [EtcdLock(etcd_cluster.etcd, tokens=True) for _ in range(clients)]
    counter, inside, most_inside = 0, 0, 0
    tokens: list[int] = []

    async def work(lock: EtcdLock) -> None:
        nonlocal counter, inside, most_inside
        for _ in range(3):
            lease = await lock.acquire(name, TTL)
            inside += 1
            most_inside = max(most_inside, inside)
            seen = counter
            await asyncio.sleep(0.01)  # any other holder would now overwrite or be overwritten
            counter = seen + 1
            tokens.append(lease.token or 0)
            inside -= 1
            assert await lock.release(lease)

    async with closing(*locks):
        await asyncio.gather(*(work(lock) for lock in locks))
    assert (counter, most_inside) == (clients * 3, 1)
    assert tokens == sorted(tokens)  # each holder's key was made after the previous holder's
    assert len(set(tokens)) == len(tokens)
    assert await held_keys(etcd_cluster, name) == []  # every release revoked its lease, deleting its key


async def test_the_token_is_the_create_revision_of_the_holders_key(etcd_cluster: LocalCluster) -> None:
    name = resource()
    first, second = EtcdLock(etcd_cluster.etcd, tokens=True), EtcdLock(etcd_cluster.etcd, tokens=True)
    async with closing(first, second):
        lease = await first.acquire(name, TTL)
        ((key, created),) = await held_keys(etcd_cluster, name)
        assert (lease.token, lease.owner) == (created, key.decode())
        assert await first.release(lease)
        later = await second.acquire(name, TTL)
        ((key, created),) = await held_keys(etcd_cluster, name)
        assert later.token == created > (lease.token or 0)
        assert await second.release(later)


async def test_lock_only_carries_no_token_and_claims_the_granted_ttl(etcd_cluster: LocalCluster) -> None:
    lock = EtcdLock(etcd_cluster.etcd)
    async with closing(lock):
        lease = await lock.acquire(resource(), TTL)
        assert lease.token is None
        assert lease.until is not None
        assert await lock.release(lease)


async def test_waiters_are_served_in_create_revision_order(etcd_cluster: LocalCluster) -> None:
    name = resource()
    holder = EtcdLock(etcd_cluster.etcd, tokens=True)
    waiters = [EtcdLock(etcd_cluster.etcd, tokens=True) for _ in range(3)]
    order: list[int] = []

    async def wait(lock: EtcdLock, number: int) -> LeaseInfo:
        lease = await lock.acquire(name, TTL)
        order.append(number)
        await lock.release(lease)
        return lease

    async with closing(holder, *waiters):
        held = await holder.acquire(name, TTL)
        tasks = []
        for number, lock in enumerate(waiters):  # each in line before the next, so their keys are ordered
            tasks.append(asyncio.create_task(wait(lock, number)))
            await eventually(in_line(etcd_cluster, name, number + 2), what=f"waiter {number} in line")
        assert await holder.release(held)
        leases = await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    assert [lease.token or 0 for lease in leases] == sorted(lease.token or 0 for lease in leases)


def in_line(cluster: LocalCluster, name: str, count: int) -> Callable[[], Awaitable[bool]]:
    """True once `count` keys (the holder's and the waiters') are under the lock's prefix."""

    async def check() -> bool:
        return len(await held_keys(cluster, name)) == count

    return check


async def test_a_waiter_gives_its_place_up_after_its_wait(etcd_cluster: LocalCluster) -> None:
    name = resource()
    holder, waiter = EtcdLock(etcd_cluster.etcd), EtcdLock(etcd_cluster.etcd, wait_ttls=0.5)
    async with closing(holder, waiter):
        held = await holder.acquire(name, TTL)
        with pytest.raises(LockNotAcquired, match="is held; gave up the place in line"):
            await waiter.acquire(name, TTL)
        assert [key.decode() for key, _ in await held_keys(etcd_cluster, name)] == [held.owner]
        assert await holder.release(held)


async def test_a_waiter_whose_session_expired_in_line_does_not_take_the_lock(
    etcd_cluster: LocalCluster,
) -> None:
    """The check Jepsen found missing in etcd 3.4.3's client: is my key still there once nothing is ahead?"""
    name = resource()
    holder, waiter = EtcdLock(etcd_cluster.etcd), EtcdLock(etcd_cluster.etcd)
    async with closing(holder, waiter):
        held = await holder.acquire(name, TTL)
        waiting = asyncio.create_task(waiter.acquire(name, TTL))
        await eventually(in_line(etcd_cluster, name, 2), what="the waiter in line")
        async with raw(etcd_cluster) as client:  # its lease ends on etcd, as if it had expired
            found = await client.get_prefix(lock_prefix(name), sort_order="ascend", sort_target="create")
            await client.revoke_lease(found[1].lease)
        assert await holder.release(held)
        with pytest.raises(LockNotAcquired, match="expired in line"):
            await waiting
        assert await held_keys(etcd_cluster, name) == []


async def test_a_release_of_a_lease_it_never_gave_is_refused(etcd_cluster: LocalCluster) -> None:
    lock = EtcdLock(etcd_cluster.etcd)
    async with closing(lock):
        assert not await lock.release(LeaseInfo(resource="r", owner=f"{lock_prefix('r').decode()}beef"))


def test_a_url_that_is_not_etcd_is_refused() -> None:
    with pytest.raises(LabLockError, match="must look like etcd://HOST:PORT"):
        EtcdLock("redis://127.0.0.1:6379")
