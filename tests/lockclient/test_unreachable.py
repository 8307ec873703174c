"""An unreachable majority is an outage: a typed error after `retry.unreachable`, never a wait forever.

Contention (the lock held elsewhere) is still waited out until `timeout`,
and `timeout` bounds the whole acquire, the token draw included. Masters
are killed (-9) or paused (SIGSTOP) on private clusters.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import (
    ConfigurationError,
    LockNotAcquired,
    QuorumUnavailable,
    Redlock,
    RetryPolicy,
    SQLiteTokens,
    TokenSourceError,
    ZooKeeperTokens,
    open_token_source,
)
from tests.lockclient._recorder import Recorder
from tests.waiting import eventually

Factory = Callable[[ClusterSpec], LocalCluster]
MAJORITY = ("redis-0", "redis-1", "redis-2")


async def start(cluster_factory: Factory, spec: ClusterSpec | None = None) -> LocalCluster:
    return await asyncio.to_thread(cluster_factory, spec or ClusterSpec(redis=5))


async def test_a_killed_majority_raises_quorum_unavailable_with_default_settings(
    cluster_factory: Factory,
) -> None:
    cluster = await start(cluster_factory)
    recorder = Recorder()
    killed = tuple(cluster.nodes[name].url for name in MAJORITY)
    async with Redlock(cluster.redis_urls, observer=recorder) as locker:  # every setting at its default
        for name in MAJORITY:
            await asyncio.to_thread(cluster.kill, name)
        async with asyncio.timeout(60):  # no acquire timeout given: the outage alone must end the wait
            with pytest.raises(QuorumUnavailable) as caught:
                async with locker.lock("outage", ttl=2.0):
                    pytest.fail("granted without a quorum")
    error = caught.value
    assert isinstance(error, LockNotAcquired)
    assert isinstance(error, TimeoutError)
    assert error.unreachable == killed
    assert all(url in str(error) for url in killed)
    assert "outage, not contention" in str(error)
    assert "RetryPolicy(unreachable=SECONDS)" in str(error)  # the fix, if the outage is expected to be short
    assert {r["reason"] for r in recorder.named("retried")} == {"unreachable"}
    (gave_up,) = recorder.named("not_acquired")
    assert gave_up["unreachable"]
    assert gave_up["seconds"] >= RetryPolicy().unreachable  # it kept trying for the whole window
    failed = {url for event in recorder.named("masters_failed") for url in event["masters"]}
    assert failed == set(killed)


async def test_a_hung_majority_is_an_outage_too(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    async with Redlock(cluster.redis_urls, node_timeout=0.2, retry=RetryPolicy(unreachable=1.0)) as locker:
        for name in MAJORITY:
            cluster.pause(name)  # SIGSTOP: connections accept, nothing answers
        try:
            async with asyncio.timeout(60):
                with pytest.raises(QuorumUnavailable, match="no answer within 200 ms") as caught:
                    await locker.acquire("hung")
        finally:
            for name in MAJORITY:
                cluster.resume(name)
    assert caught.value.unreachable == tuple(cluster.nodes[name].url for name in MAJORITY)


@pytest.mark.parametrize("fault", ["paused", "killed"])
async def test_an_outage_shorter_than_the_timeout_allows_is_reported_as_one_not_blamed_on_the_token_source(
    cluster_factory: Factory, tmp_path: Path, fault: str
) -> None:
    """With a token source and `timeout` under `retry.unreachable`, the backoff between attempts ran
    to the deadline, and the next attempt's draw, left no time, blamed the (healthy) source with no
    reasons. The answer is the last attempt's: the outage, with each master's reason."""
    cluster = await start(cluster_factory)
    down = tuple(cluster.nodes[name].url for name in MAJORITY)
    path = tmp_path / "tokens.db"
    # no jitter: attempts start 0.3 s apart (after the previous one's 50 ms node timeout at most), so the
    # deadline falls in a backoff, never in an attempt, and that backoff is cut at it
    steady = RetryPolicy(delay=0.3, jitter=0.0, max_delay=0.3)
    async with Redlock(cluster.redis_urls, tokens=SQLiteTokens(path), retry=steady) as locker:
        for name in MAJORITY:
            if fault == "paused":
                cluster.pause(name)  # SIGSTOP: connections accept, nothing answers
            else:
                await asyncio.to_thread(cluster.kill, name)
        try:
            async with asyncio.timeout(30):
                with pytest.raises(QuorumUnavailable) as caught:
                    await locker.acquire("short", ttl=5.0, timeout=1.0)  # under retry.unreachable (5 s)
        finally:
            if fault == "paused":
                for name in MAJORITY:
                    cluster.resume(name)
        async with SQLiteTokens(path) as tokens:
            drawn = await tokens.upper_bound("short")
    error = caught.value
    assert "token source" not in str(error)
    assert error.unreachable == down
    assert set(error.reasons) == set(cluster.redis_urls)  # every master's answer to the last attempt
    assert all(error.reasons[url] != "ok" for url in down)
    assert drawn >= 2  # it did retry, with a fresh token each time, before the timeout ended it


async def test_contention_is_waited_out_until_the_timeout_not_given_up_as_an_outage(
    urls: list[str], resource: str
) -> None:
    # an outage window of 0 would give up at once on an unreachable quorum; a held lock is not one
    async with Redlock(urls) as holder, Redlock(urls, retry=RetryPolicy(unreachable=0.0)) as waiter:
        lease = await holder.acquire(resource, ttl=30.0)
        with pytest.raises(LockNotAcquired, match="held by another owner") as caught:
            await waiter.acquire(resource, timeout=1.5)
        assert not isinstance(caught.value, QuorumUnavailable)  # contention ends at the timeout
        await holder.release(lease)


async def test_an_outage_shorter_than_the_window_is_waited_out(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    recorder = Recorder()
    async with Redlock(cluster.redis_urls, retry=RetryPolicy(unreachable=120.0), observer=recorder) as locker:
        for name in MAJORITY:
            await asyncio.to_thread(cluster.kill, name)
        waiting = asyncio.create_task(locker.acquire("healed", ttl=10.0))
        await eventually(lambda: len(recorder.named("retried")) >= 2, what="two attempts during the outage")
        for name in MAJORITY:
            await asyncio.to_thread(cluster.restart, name)
        async with asyncio.timeout(60):
            lease = await waiting
        assert sum(answer == "ok" for answer in lease.nodes.values()) >= 3
        await locker.release(lease)


async def test_timeout_bounds_the_token_draw_when_zookeeper_is_down(
    cluster_factory: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = await start(cluster_factory, ClusterSpec(redis=5, zookeeper=True))
    # the source alone would keep trying for 20 s; the acquire's timeout must cut it short
    tokens = ZooKeeperTokens(cluster.zookeeper, timeout=20.0, connect_timeout=20.0)
    recorder = Recorder()
    async with Redlock(cluster.redis_urls, tokens=tokens, observer=recorder) as locker:
        async with locker.lock("drawn", ttl=5.0, timeout=30.0) as lease:
            assert lease.token > 0  # it works while ZooKeeper is up
        await asyncio.to_thread(cluster.kill, "zookeeper-0")
        # the message is the acquire's own deadline's (the source alone would raise TokenSourceError)
        with pytest.raises(LockNotAcquired, match="the token source") as caught:
            async with locker.lock("drawn", ttl=5.0, timeout=1.0):
                pytest.fail("granted without a token")
        # the source's own draw is still waiting on ZooKeeper: let it finish, so closing is quick
        await asyncio.to_thread(cluster.restart, "zookeeper-0")
    assert not isinstance(caught.value, QuorumUnavailable)  # the masters are fine: it is the source
    gave_up = recorder.named("not_acquired")  # observers (metrics) count this give-up too
    assert [(e["resource"], e["unreachable"]) for e in gave_up] == [("drawn", False)]
    assert [(r.levelname, r.__dict__["resource"]) for r in _warnings(caplog, "the token source")] == [
        ("WARNING", "drawn")
    ]


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "lockclient" and text in r.getMessage()]


async def test_a_token_source_that_is_down_fails_the_acquire_with_a_warning(
    urls: list[str], resource: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing listens where the source should be: the acquire fails at once, and the log says why."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    recorder = Recorder()
    tokens = open_token_source(f"postgresql://postgres@127.0.0.1:{port}/postgres")
    async with Redlock(urls, tokens=tokens, observer=recorder) as locker:
        with pytest.raises(TokenSourceError, match="could not issue a token"):
            await locker.acquire(resource, ttl=5.0)
    (warning,) = _warnings(caplog, "could not issue a token")
    assert (warning.levelname, warning.__dict__["resource"], warning.__dict__["token"]) == (
        "WARNING",
        resource,
        None,
    )
    assert [e["resource"] for e in recorder.named("not_acquired")] == [resource]


async def test_a_non_blocking_acquire_says_outage_at_once(cluster_factory: Factory) -> None:
    cluster = await start(cluster_factory)
    async with Redlock(cluster.redis_urls, retry=RetryPolicy(unreachable=60.0)) as locker:
        for name in MAJORITY:
            await asyncio.to_thread(cluster.kill, name)
        async with asyncio.timeout(30):
            with pytest.raises(QuorumUnavailable):
                await locker.acquire("once", blocking=False)


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_a_bad_outage_window_is_refused_with_the_fix(bad: float) -> None:
    with pytest.raises(ConfigurationError, match=r"RetryPolicy\.unreachable"):
        RetryPolicy(unreachable=bad)


class SilentMaster:
    """A listener that accepts connections and never answers, as a master does while it starts up
    or is wedged; a `rediss://` client gets no TLS handshake from it either."""

    def __init__(self) -> None:
        self.accepted = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while await reader.read(4096):  # commands (or a ClientHello) arrive; nothing goes back
                pass
        except ConnectionError:
            pass
        finally:
            writer.close()


@pytest.mark.parametrize("kind", ["silent", "down"])
async def test_a_contended_acquire_ends_by_its_timeout_when_a_master_never_confirms_the_subscription(
    urls: list[str], resource: str, kind: str
) -> None:
    """A waiter subscribes to the release channel on every master (new connections) and waited up to
    4 x node_timeout (4 s here) for each to confirm, past the acquire's `timeout`: a master that
    accepts and never answers, or one that is down when the wait begins, never confirms."""
    silent = SilentMaster()
    server = await asyncio.start_server(silent.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    if kind == "down":
        server.close()
        await server.wait_closed()
    masters = [*urls[:2], f"redis://127.0.0.1:{port}"]
    async with server, Redlock(urls[:2], ttl=30.0) as holder, Redlock(masters, node_timeout=1.0) as locker:
        held = await holder.acquire(resource, blocking=False)
        # the silent master's undo uses the attempt's node_timeout (1 s); then the subscription
        timeout = 1.5 if kind == "silent" else 0.2
        async with asyncio.timeout(3.0):  # far inside the 4 s the confirmation was waited for
            with pytest.raises(LockNotAcquired) as caught:
                await locker.acquire(resource, ttl=30.0, timeout=timeout)
        assert not isinstance(caught.value, QuorumUnavailable)  # contention, not an outage
        await holder.release(held)
    if kind == "silent":
        assert silent.accepted >= 2  # the command connection and the subscriber's
