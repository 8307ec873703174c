"""The RESP transport's own failure modes, on real redis-server processes.

A pipelined connection matches replies to requests by order, so the dangerous
cases are the ones where that order could slip: a request abandoned at its
timeout (its late reply must never answer a later request), a server that
restarts under an open connection, and a restarted server that forgot the
scripts (NOSCRIPT must be answered by EVAL, transparently).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop
from redis.asyncio import Redis

import lockclient.transport
from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import Redlock, TLSSettings
from lockclient._nodes import PING, Master, release, set_nx
from lockclient._quorum import fan_out
from lockclient.transport.codec import Command, ServerError, pack
from lockclient.transport.connection import Connection, Reply
from lockclient.transport.endpoint import Endpoint
from lockclient.transport.errors import AuthenticationError
from lockclient.transport.fanout import UNREACHABLE, Pending
from tests.closing import closing
from tests.lockclient.conftest import eventually

Factory = Callable[[ClusterSpec], LocalCluster]


def _same(reply: Any) -> Any:
    return reply


def _call(connection: Connection, *args: str) -> Reply[Any]:
    """Any command, its reply as Redis sent it."""
    return connection.send(Command(pack(*args), _same))


async def _wait(outcomes: Awaitable[list[Any]]) -> list[Any]:
    return await outcomes


@contextlib.asynccontextmanager
async def _connection(url: str) -> AsyncIterator[Connection]:
    connection = Connection(Endpoint.from_url(url), url, connect_timeout=1.0)
    async with closing(connection):
        yield connection


@contextlib.contextmanager
def _paused(cluster: LocalCluster, name: str) -> Iterator[None]:
    """`name` SIGSTOPped for the block: it takes requests and answers none until resumed."""
    cluster.pause(name)
    try:
        yield
    finally:
        cluster.resume(name)


async def one_master(cluster_factory: Factory) -> LocalCluster:
    return await asyncio.to_thread(cluster_factory, ClusterSpec(redis=1))


async def test_pipelined_replies_reach_their_own_requests(urls: list[str]) -> None:
    async with _connection(urls[0]) as connection:
        words = [f"echo-{i}" for i in range(300)]
        replies = await asyncio.gather(*(_call(connection, "ECHO", w) for w in words))
        assert replies == [w.encode() for w in words]


async def test_an_error_reply_fails_only_its_own_request(urls: list[str]) -> None:
    key = f"test-{uuid.uuid4().hex}"
    async with _connection(urls[0]) as connection:
        await _call(connection, "SET", key, "a string")
        results = await asyncio.gather(
            _call(connection, "LPUSH", key, "x"),
            _call(connection, "ECHO", "after"),
            return_exceptions=True,
        )
        assert isinstance(results[0], ServerError)
        assert "WRONGTYPE" in str(results[0])
        assert results[1] == b"after"
        await _call(connection, "DEL", key)


async def test_a_timed_out_request_drops_its_connection_and_its_late_reply_is_never_misattributed(
    cluster_factory: Factory,
) -> None:
    cluster = await one_master(cluster_factory)
    async with _connection(cluster.redis_urls[0]) as connection:
        first_id = await _call(connection, "CLIENT", "ID")
        with _paused(cluster, "redis-0"):  # SIGSTOP: the request is written, no reply comes
            [late] = await fan_out([_call(connection, "ECHO", "late")], 0.1)
            assert isinstance(late, TimeoutError)
        # the server now answers "late" on the old connection; the next request must get its own reply
        assert await _call(connection, "ECHO", "fresh") == b"fresh"
        assert await _call(connection, "CLIENT", "ID") != first_id  # a new connection


async def test_a_cancelled_request_keeps_its_place_and_its_reply_is_discarded(
    cluster_factory: Factory,
) -> None:
    cluster = await one_master(cluster_factory)
    async with _connection(cluster.redis_urls[0]) as connection:
        first_id = await _call(connection, "CLIENT", "ID")
        with _paused(cluster, "redis-0"):
            abandoned = _call(connection, "ECHO", "abandoned")
            abandoned.cancel()  # the caller went away; the request is already written
            after = _call(connection, "ECHO", "after")
        assert await after == b"after"  # the reply to "abandoned" was read and dropped, in order
        assert await _call(connection, "CLIENT", "ID") == first_id  # the same connection


async def test_a_shielded_fan_out_still_sends_what_waited_for_its_connection(
    urls: list[str], raw: list[Redis], resource: str
) -> None:
    """The undo's guarantee: a release whose caller is cancelled before the connection is open
    still reaches the master; an ordinary fan-out drops it, as an abandoned request is never sent."""
    kept = {}
    for shielded in (True, False):
        key = f"{resource}-{shielded}"
        await raw[0].set(key, "mine")
        master = Master(urls[0], connect_timeout=1.0)  # no connection yet: the release queues
        try:
            sent = master.send(release(key, "mine"))
            caller = asyncio.create_task(_wait(fan_out([sent], 1.0, shielded=shielded)))
            await asyncio.sleep(0)  # the caller now waits on the batch; the connection is still opening
            assert not sent.done()
            caller.cancel()  # the caller is gone before the connection opened
            with pytest.raises(asyncio.CancelledError):
                await caller
            [pong] = await fan_out([master.send(PING)], 1.0)  # sent after anything that was queued
            assert pong is True
            kept[shielded] = await raw[0].get(key)
        finally:
            await master.aclose()
            await raw[0].delete(key)
    assert kept == {True: None, False: b"mine"}


async def test_requests_in_flight_when_a_timeout_drops_the_connection_fail_as_connection_errors(
    cluster_factory: Factory,
) -> None:
    cluster = await one_master(cluster_factory)
    async with _connection(cluster.redis_urls[0]) as connection:
        await _call(connection, "PING")
        with _paused(cluster, "redis-0"):
            patient = _call(connection, "ECHO", "patient")
            [late] = await fan_out([_call(connection, "ECHO", "late")], 0.1)
            assert isinstance(late, TimeoutError)
            with pytest.raises(ConnectionError, match="dropped"):
                await patient  # it may or may not have been applied: the caller is told it failed
        assert await _call(connection, "ECHO", "fresh") == b"fresh"


async def test_the_connection_comes_back_after_a_server_restart(cluster_factory: Factory) -> None:
    cluster = await one_master(cluster_factory)
    url = cluster.redis_urls[0]
    master = Master(url, connect_timeout=1.0)
    async with closing(master):
        assert await master.send(PING)
        await asyncio.to_thread(cluster.stop, "redis-0")
        [down] = await fan_out([master.send(PING)], 1.0)
        assert isinstance(down, ConnectionRefusedError)  # refused, reported, not hung
        assert isinstance(down, UNREACHABLE)
        await asyncio.to_thread(cluster.restart, "redis-0")

        async def answers() -> bool:
            [outcome] = await fan_out([master.send(PING)], 1.0)
            return outcome is True

        await eventually(answers)
        assert await master.send(set_nx(f"test-{uuid.uuid4().hex}", "v", 10_000))


async def test_scripts_are_sent_again_after_a_restart_without_persistence(cluster_factory: Factory) -> None:
    cluster = await one_master(cluster_factory)
    url = cluster.redis_urls[0]
    master = Master(url, connect_timeout=1.0)
    raw = Redis.from_url(url)
    async with closing(raw, master):
        assert await master.send(set_nx("k", "mine", 10_000))
        assert await master.send(release("k", "mine"))  # the script is loaded now
        await asyncio.to_thread(cluster.stop, "redis-0")
        await asyncio.to_thread(cluster.restart, "redis-0")  # a new process: its script cache is empty
        await raw.set("k", "mine", px=10_000)
        await raw.config_resetstat()

        async def released() -> bool:
            [outcome] = await fan_out([master.send(release("k", "mine"))], 1.0)
            return outcome is True  # the first try after the restart may meet the closed connection

        await eventually(released)
        assert await raw.get("k") is None
        stats = await raw.info("commandstats")
        assert stats["cmdstat_evalsha"]["calls"] >= 1
        assert stats["cmdstat_evalsha"]["failed_calls"] >= 1  # NOSCRIPT
        assert stats["cmdstat_eval"]["calls"] == 1  # sent once, then served by SHA
        assert await master.send(release("k", "mine")) is False  # gone now; the script is known again, by SHA
        assert (await raw.info("commandstats"))["cmdstat_eval"]["calls"] == 1


async def test_the_url_logs_in_and_selects_its_database(cluster_factory: Factory) -> None:
    cluster = await one_master(cluster_factory)
    # the helper's readiness probe cannot log in: wait for the server through the client under test
    node = await asyncio.to_thread(cluster.add_redis, args=("--requirepass", "s3cret"), wait=False)
    url = f"redis://:s3cret@127.0.0.1:{node.port}/3"
    master = Master(url, connect_timeout=1.0)
    raw = Redis.from_url(url)
    async with closing(raw, master):

        async def answers() -> bool:
            [outcome] = await fan_out([master.send(PING)], 1.0)
            return outcome is True

        await eventually(answers)
        assert await master.send(set_nx("in-db-3", "v", 10_000))
        assert await raw.get("in-db-3") == b"v"
        wrong = Master(f"redis://:wrong@127.0.0.1:{node.port}", connect_timeout=1.0)
        [refused] = await fan_out([wrong.send(PING)], 1.0)
        await wrong.aclose()
        assert isinstance(refused, AuthenticationError)  # a setting to fix, not a master that is down
        assert not isinstance(refused, UNREACHABLE)
        assert "WRONGPASS" in str(refused) or "invalid" in str(refused)
        assert f"cannot connect to redis://:***@127.0.0.1:{node.port}:" in str(refused)  # no password shown


async def test_a_fan_outs_outcomes_do_not_change_once_returned_and_late_answers_are_read_through_pending(
    cluster_factory: Factory,
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=3))
    masters = [Master(url, connect_timeout=1.0) for url in cluster.redis_urls]
    async with closing(*masters):
        for master in masters:
            assert await master.send(PING)
        with _paused(cluster, "redis-2"):  # it accepts the command and answers only once resumed
            key = f"test-{uuid.uuid4().hex}"
            outcomes = await fan_out([m.send(set_nx(key, "v", 10_000)) for m in masters], 30.0, need=2)
            returned = list(outcomes)
            late = outcomes[2]
            assert outcomes[:2] == [True, True]
            assert isinstance(late, Pending)
            assert late.now() is late  # still out
        await eventually(lambda: late.now() is True, what="the late grant")
        assert outcomes == returned  # the list the fan-out returned is the same; the answer came via Pending
        assert outcomes[2] is late


def test_endpoints_are_read_from_urls() -> None:
    assert Endpoint.from_url("redis://127.0.0.1:7000") == Endpoint(host="127.0.0.1", port=7000)
    assert Endpoint.from_url("rediss://u:p%40ss@h/2") == Endpoint(
        host="h", tls=TLSSettings(), username="u", password="p@ss", db=2
    )
    assert Endpoint.from_url("unix:///run/redis.sock?db=1") == Endpoint(path="/run/redis.sock", db=1)


def test_the_transport_runs_on_uvloop(urls: list[str], resource: str) -> None:
    """uvloop's transports implement asyncio's interface without subclassing it: the lock must not care."""

    async def lock_and_release() -> list[str]:
        async with Redlock(urls) as locker:
            lease = await locker.acquire(resource, blocking=False)
            await locker.release(lease)
            return [type(asyncio.get_running_loop()).__module__]

    assert uvloop.run(lock_and_release()) == ["uvloop"]


def test_each_transport_module_imports_only_the_ones_before_it() -> None:
    """codec <- endpoint <- errors <- connection <- fanout: the seams docs/decisions.md describes."""
    order = ["codec", "endpoint", "errors", "connection", "fanout"]
    package = Path(lockclient.transport.__file__).parent
    for position, name in enumerate(order):
        tree = ast.parse((package / f"{name}.py").read_text())
        imported = {
            node.module.removeprefix("lockclient.transport.")
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("lockclient.transport.")
        }
        assert imported <= set(order[:position]), (name, imported)
        assert "redis" not in {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}  # our own
