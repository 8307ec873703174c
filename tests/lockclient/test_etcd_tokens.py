"""etcd tokens on a real 3-member cluster: leader kills, full restarts on their data, no quorum.

Order across processes and the upper bound are tested with every other source
in test_tokens.py; here are the faults that are etcd's own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import pytest

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.faults.proxy import DelayProxy
from lockclient import ConfigurationError, EtcdTokens, TokenSourceError, open_token_source
from lockclient.tokens.etcd import IN_FLIGHT, url_options
from tests.lockclient.silent import Listener
from tests.waiting import eventually

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


@contextlib.asynccontextmanager
async def drawing(source: EtcdTokens, resource: str) -> AsyncIterator[None]:
    """Draws going on in the background (gRPC connects to a member only for a call), errors ignored."""

    async def loop() -> None:
        while True:
            with contextlib.suppress(TokenSourceError):
                await source.next_token(resource)
            await asyncio.sleep(0.05)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("tls", [None, "mutual"])
async def test_a_member_that_accepts_and_never_answers_is_left_after_request_timeout(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], resource: str, tls: str | None
) -> None:
    """gRPC waits 20 s for a connection's handshake whatever the call's deadline: a member that
    accepted and did not answer was not asked again for that long after it was back (over TLS, the
    silent member never answers the TLS handshake either)."""
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, etcd=1, etcd_tls=tls))
    url = urlsplit(cluster.etcd)
    host, port = url.netloc.rsplit(":", 1)
    silent = Listener()
    server = await asyncio.start_server(silent.serve, "127.0.0.1", 0)
    async with server, DelayProxy(host, int(port)) as proxy:
        hosts = f"127.0.0.1:{proxy.port}"
        settings = url_options(url.query)
        async with EtcdTokens(hosts, timeout=FAULT_TIMEOUT, request_timeout=1.0, **settings) as source:
            first = await source.next_token(resource)
            source.timeout = 1.0
            async with drawing(source, resource):
                proxy.retarget("127.0.0.1", server.sockets[0].getsockname()[1])
                await proxy.drop()  # the next connection goes to the silent member
                await eventually(lambda: silent.accepted >= 1, what="a connection reaching the silent member")
                proxy.retarget(host, int(port))
                await eventually(
                    lambda: silent.closed >= 1, within=8.0, what="the source giving up on the silent member"
                )
            source.timeout = FAULT_TIMEOUT
            assert await source.next_token(resource) > first


async def test_a_member_back_after_a_long_outage_is_used_within_seconds(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], resource: str
) -> None:
    """gRPC waits 1.6 times longer before each new attempt to connect to a member that is down (up
    to 120 s): 25 s into an outage, the next attempt was 13 s or more away, so a member back then
    went unused that long. The wait is capped at 1 s."""
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, etcd=1))
    host, port = cluster.etcd.removeprefix("etcd://").rsplit(":", 1)
    down = Listener(silent=False)
    server = await asyncio.start_server(down.serve, "127.0.0.1", 0)
    async with server, DelayProxy(host, int(port)) as proxy:
        hosts = f"127.0.0.1:{proxy.port}"
        async with EtcdTokens(hosts, timeout=FAULT_TIMEOUT, request_timeout=1.0) as source:
            first = await source.next_token(resource)
            source.timeout = 1.0
            async with drawing(source, resource):
                proxy.retarget("127.0.0.1", server.sockets[0].getsockname()[1])
                await proxy.drop()  # the member is down: every attempt to connect is cut at once
                await asyncio.sleep(25.0)  # the outage, long enough for gRPC's waits to grow
                attempts = down.accepted
                await eventually(lambda: down.accepted > attempts, within=60.0, what="an attempt to connect")
                proxy.retarget(host, int(port))  # the member is back just after an attempt
            async with asyncio.timeout(6.0):  # a deadline on the test, far inside the 13 s
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
