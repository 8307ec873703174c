"""etcd tokens on a real 3-member cluster: leader kills, full restarts on their data, no quorum.

Order across processes and the upper bound are tested with every other source
in test_tokens.py; here are the faults that are etcd's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import ConfigurationError, EtcdTokens, TokenSourceError, open_token_source
from lockclient.tokens.etcd import IN_FLIGHT

FAULT_TIMEOUT = 60.0  # a draw's deadline across an election on a busy machine: it waits, never guesses
RESOURCES = ("a", "b")


async def draw_all(source: EtcdTokens, resource: str, count: int) -> dict[str, list[int]]:
    """`count` tokens for each of two resources, drawn concurrently (so they share transactions);
    the highest token of each resource is then its upper bound."""
    names = [f"{resource}-{name}" for name in RESOURCES]
    per_name = await asyncio.gather(*(asyncio.gather(*(source.next_token(n) for _ in range(count)))
                                      for n in names))  # fmt: skip
    for name, batch in zip(names, per_name, strict=True):
        assert len(set(batch)) == len(batch), "one resource got one token twice"
        assert await source.upper_bound(name) == max(batch)
    return dict(zip(names, per_name, strict=True))


def lowest(draws: dict[str, list[int]]) -> int:
    return min(min(tokens) for tokens in draws.values())


def highest(draws: dict[str, list[int]]) -> int:
    return max(max(tokens) for tokens in draws.values())


@pytest.fixture
def etcd3(cluster_factory: Callable[[ClusterSpec], LocalCluster]) -> LocalCluster:
    """A private 3-member cluster for a test that injects faults."""
    return cluster_factory(ClusterSpec(redis=0, etcd=3))


async def test_tokens_keep_increasing_across_the_kill_of_the_leader(
    etcd3: LocalCluster, resource: str
) -> None:
    async with EtcdTokens(etcd3.etcd.removeprefix("etcd://"), timeout=FAULT_TIMEOUT) as source:
        before = await draw_all(source, resource, 5)
        leader = await asyncio.to_thread(etcd3.etcd_leader)
        await asyncio.to_thread(etcd3.kill, leader)
        after = await draw_all(source, resource, 5)  # the next leader is elected meanwhile
        assert lowest(after) > highest(before)
        await asyncio.to_thread(etcd3.restart, leader)
        assert lowest(await draw_all(source, resource, 2)) > highest(after)


async def test_tokens_keep_increasing_across_a_restart_of_the_whole_cluster_on_its_data(
    etcd3: LocalCluster, resource: str
) -> None:
    async with EtcdTokens(etcd3.etcd.removeprefix("etcd://"), timeout=FAULT_TIMEOUT) as source:
        before = await draw_all(source, resource, 5)
        await asyncio.to_thread(etcd3.restart_all, "etcd")  # every member killed with -9 first
        for name, tokens in before.items():  # the keys and their revisions came back from the data
            assert await source.upper_bound(name) == max(tokens)
        after = await draw_all(source, resource, 5)
        assert lowest(after) > highest(before)


async def test_no_quorum_no_token_a_clear_error_within_the_timeout(
    etcd3: LocalCluster, resource: str
) -> None:
    members = [n.name for n in etcd3.nodes.values() if n.kind == "etcd"]
    async with EtcdTokens(etcd3.etcd.removeprefix("etcd://"), timeout=2.0, request_timeout=0.5) as source:
        before = await source.next_token(resource)
        for name in members[:2]:
            await asyncio.to_thread(etcd3.kill, name)
        async with asyncio.timeout(30):  # a deadline on the test, not a speed claim
            with pytest.raises(TokenSourceError, match="no quorum") as caught:
                await source.next_token(resource)
            assert caught.value.source == "etcd"
            assert "majority of the etcd members" in str(caught.value)
            with pytest.raises(TokenSourceError):
                await source.upper_bound(resource)  # a linearizable read needs the quorum too
        await asyncio.to_thread(etcd3.restart, members[0])
        source.timeout = FAULT_TIMEOUT
        assert await source.next_token(resource) > before


async def test_a_draw_waits_its_timeout_not_one_per_transaction_queued_before_it(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], resource: str
) -> None:
    """Two draws for one resource never share a transaction and IN_FLIGHT go out at once, so draws
    for one resource queue in rounds; on a paused member each round waited the whole timeout, and
    the last of these draws 16 rounds (32 s here)."""
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, etcd=1))
    hosts = cluster.etcd.removeprefix("etcd://")
    async with EtcdTokens(hosts, timeout=FAULT_TIMEOUT, request_timeout=0.5) as source:
        first = await source.next_token(resource)
        source.timeout = 2.0
        await asyncio.to_thread(cluster.pause, "etcd-0")
        try:
            async with asyncio.timeout(10.0):  # a deadline on the test, far inside the 32 s
                draws = (source.next_token(resource) for _ in range(16 * IN_FLIGHT))
                outcomes = await asyncio.gather(*draws, return_exceptions=True)
        finally:
            await asyncio.to_thread(cluster.resume, "etcd-0")
        for outcome in outcomes:
            assert isinstance(outcome, TokenSourceError)
            assert "within 2 s (no quorum, or no member reachable" in str(outcome)
        source.timeout = FAULT_TIMEOUT
        assert await source.next_token(resource) > first


async def test_every_member_unreachable_is_a_token_source_error(resource: str) -> None:
    async with EtcdTokens("127.0.0.1:1,127.0.0.1:2", timeout=0.5, request_timeout=0.2) as source:
        with pytest.raises(TokenSourceError, match="etcd token source could not issue a token"):
            await source.next_token(resource)


def test_etcd_urls_are_read_and_bad_ones_say_how_to_fix_them() -> None:
    source = open_token_source("etcd://127.0.0.1:2379,127.0.0.1:22379")
    assert isinstance(source, EtcdTokens)
    assert source.endpoints == [("127.0.0.1", 2379), ("127.0.0.1", 22379)]
    for bad in ("etcd://", "etcd://host", "etcd://h:2379/app", "etcd://h:0"):
        with pytest.raises(ConfigurationError, match="host:port"):
            open_token_source(bad)
