"""Token sources on real servers: order across processes, upper bounds, restarts, creation races."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import gc
import os
import sqlite3
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.faults.proxy import DelayProxy
from lockclient import (
    ConfigurationError,
    EtcdTokens,
    PostgresTokens,
    RedisIncrTokens,
    SQLiteTokens,
    TokenSource,
    TokenSourceError,
    ZooKeeperTokens,
    open_token_source,
)
from lockclient.tokens import postgres as postgres_tokens
from lockclient.tokens import sqlite as sqlite_tokens
from lockclient.tokens import zookeeper as zookeeper_tokens
from lockclient.tokens.zookeeper import url_options
from tests.lockclient.processes import run_all
from tests.lockclient.silent import Listener
from tests.waiting import eventually

PROCESSES = 3
DRAWS = 40
TASKS = 16  # concurrent draws in each process
BATCHED_DRAWS = 10  # per task


async def fresh_database(dsn: str) -> str:
    """`dsn` (TLS parameters included) on a new, empty database, so the sequence does not exist yet."""
    name = f"tokens_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(dsn)  # asyncpg reads libpq's TLS parameters in a DSN itself
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{name}"))


@pytest.fixture
async def pg_dsn(postgres_cluster: LocalCluster) -> str:
    return await fresh_database(postgres_cluster.postgres_dsn)


@pytest.fixture
async def pg_tls_dsn(postgres_tls_cluster: LocalCluster) -> str:
    return await fresh_database(postgres_tls_cluster.postgres_dsn)


def assert_issue_order(recorded: list[list[list[int]]]) -> list[int]:
    """Per resource: unique tokens; whenever one draw finished before another began, its token is
    lower; each task's own tokens increase. Records are `[before_ns, after_ns, token, task, resource]`."""
    per_resource: dict[int, list[tuple[int, int, int, tuple[int, int]]]] = {}
    for process, records in enumerate(recorded):
        for before, after, token, task, index in records:
            per_resource.setdefault(index, []).append((before, after, token, (process, task)))
    everything = []
    for draws in per_resource.values():
        draws.sort(key=lambda d: d[1])  # by the time each draw finished
        tokens = [token for _, _, token, _ in draws]
        assert len(set(tokens)) == len(tokens), "a token was issued twice for one resource"
        assert all(0 < t < 2**63 for t in tokens)
        finished = [after for _, after, _, _ in draws]
        highest_so_far: list[int] = []
        for token in tokens:
            highest_so_far.append(max(token, highest_so_far[-1]) if highest_so_far else token)
        for before, _, token, _ in draws:
            done = bisect.bisect_left(finished, before)  # draws that finished before this one began
            if done:
                assert highest_so_far[done - 1] < token, "a later draw got a lower token"
        by_task: dict[tuple[int, int], list[int]] = {}
        for _, _, token, owner in sorted(draws):  # by the time each draw began
            by_task.setdefault(owner, []).append(token)
        assert all(own == sorted(own) for own in by_task.values())
        everything += tokens
    return everything


@pytest.fixture(
    params=[
        "sqlite",
        "postgres",
        "postgres-tls",
        "zookeeper",
        "zookeeper-tls",
        "etcd",
        "etcd-tls",
        "redis-incr",
    ]
)
def source_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each source's URL; the -tls ones reach a TLS-only server with a client certificate."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tokens.db'}"
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_dsn"))
    if request.param == "postgres-tls":
        return str(request.getfixturevalue("pg_tls_dsn"))
    if request.param == "zookeeper":
        return f"zookeeper://{request.getfixturevalue('zookeeper_cluster').zookeeper}/fencegate-tests"
    if request.param == "zookeeper-tls":
        cluster: LocalCluster = request.getfixturevalue("zookeeper_tls_cluster")
        return urlunsplit(urlsplit(cluster.zookeeper_url)._replace(path="/fencegate-tests"))
    if request.param == "etcd":
        return str(request.getfixturevalue("etcd_cluster").etcd)
    if request.param == "etcd-tls":
        return str(request.getfixturevalue("etcd_tls_cluster").etcd)
    return f"{request.getfixturevalue('redis_cluster').redis_urls[0]}?unsafe=1"


async def test_tokens_from_concurrent_processes_are_unique_and_in_issue_order(
    source_url: str, resource: str, tmp_path: Path
) -> None:
    outs = [tmp_path / f"draws-{i}.jsonl" for i in range(PROCESSES)]
    recorded = await run_all("tests.lockclient._draw_tokens", outs, source_url, resource, str(DRAWS))
    tokens = assert_issue_order(recorded)
    assert len(tokens) == PROCESSES * DRAWS
    assert all(len(process) == DRAWS for process in recorded)
    source = open_token_source(source_url, allow_unsafe=True)
    try:
        assert await source.upper_bound(resource) >= max(tokens)
        newest = await source.next_token(resource)
        assert newest > max(tokens)
        assert await source.upper_bound(resource) >= newest
    finally:
        await source.aclose()


@pytest.mark.parametrize("resources", [1, 3])
async def test_concurrent_draws_share_requests_yet_stay_unique_and_in_issue_order(
    source_url: str, resource: str, tmp_path: Path, resources: int
) -> None:
    """Many tasks in several processes: draws share round trips, for one resource or several."""
    outs = [tmp_path / f"draws-{i}.jsonl" for i in range(PROCESSES)]
    args = (source_url, resource, str(BATCHED_DRAWS), str(TASKS), str(resources))
    recorded = await run_all("tests.lockclient._draw_tokens", outs, *args)
    tokens = assert_issue_order(recorded)
    assert len(tokens) == PROCESSES * TASKS * BATCHED_DRAWS
    source = open_token_source(source_url, allow_unsafe=True)
    try:
        for index in range(resources):
            name = resource if resources == 1 else f"{resource}-{index}"
            mine = [d[2] for process in recorded for d in process if d[4] == index]
            assert await source.upper_bound(name) >= max(mine)
    finally:
        await source.aclose()


async def test_upper_bound_of_an_unused_resource_is_zero(source_url: str, resource: str) -> None:
    source = open_token_source(source_url, allow_unsafe=True)
    try:
        if isinstance(source, PostgresTokens | ZooKeeperTokens):  # one sequence, one zxid: global bounds
            assert await source.upper_bound(resource) >= 0
        else:
            assert await source.upper_bound(resource) == 0
    finally:
        await source.aclose()


async def across_a_restart(
    cluster: LocalCluster, node: str, source: TokenSource, resource: str
) -> tuple[list[int], list[int]]:
    """Three tokens drawn before `node` is stopped and restarted, and three after."""
    before = [await source.next_token(resource) for _ in range(3)]
    await asyncio.to_thread(cluster.stop, node)
    await asyncio.to_thread(cluster.restart, node)
    after = [await source.next_token(resource) for _ in range(3)]
    return before, after


async def test_zookeeper_tokens_keep_increasing_across_a_restart(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], resource: str
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, zookeeper=True))
    async with ZooKeeperTokens(cluster.zookeeper, timeout=60.0) as source:
        before, after = await across_a_restart(cluster, "zookeeper-0", source, resource)
        assert before == sorted(before)
        assert after == sorted(after)
        assert after[0] > before[-1]
        assert await source.upper_bound(resource) >= after[-1]


@pytest.mark.parametrize("tls", [None, "mutual"])
async def test_zookeeper_gives_up_on_a_member_that_never_answers_the_handshake(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], resource: str, tls: str | None
) -> None:
    """kazoo waits for a handshake's answer as long as the session timeout (60 s here), longer than
    a draw may take; the source gives up on a silent member after `connect_timeout` and goes on
    (over TLS, the silent member never answers the TLS handshake either)."""
    cluster = await asyncio.to_thread(
        cluster_factory, ClusterSpec(redis=0, zookeeper_tls=tls, zookeeper=True)
    )
    host, port = cluster.zookeeper.rsplit(":", 1)
    silent = Listener()
    server = await asyncio.start_server(silent.serve, "127.0.0.1", 0)
    silent_port = server.sockets[0].getsockname()[1]
    async with server, DelayProxy(host, int(port)) as proxy:
        settings = url_options(urlsplit(cluster.zookeeper_url).query)
        source = ZooKeeperTokens(f"127.0.0.1:{proxy.port}", timeout=60.0, connect_timeout=1.0, **settings)
        async with source:
            first = await source.next_token(resource)
            proxy.retarget("127.0.0.1", silent_port)
            await proxy.drop()  # kazoo reconnects, through the proxy, to the silent member
            await eventually(lambda: silent.accepted >= 1, what="a reconnect reaching the silent member")
            proxy.retarget(host, int(port))
            await eventually(
                lambda: silent.closed >= 1, within=20.0, what="the source giving up on the silent member"
            )
            assert await source.next_token(resource) > first


def _open_sockets() -> int:
    """Sockets this process has open (a socket pair counts two)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since it was listed
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


async def test_a_zookeeper_client_is_closed_when_its_caller_gives_up_twice_while_it_connects(
    resource: str,
) -> None:
    """A read that gave up while the source connected (its deadline), then again while the half-started
    client was being stopped (the gateway's guard, then its shutdown), left the client stopped and
    never closed: its wake-up socket pair stayed open until the collector found it."""
    silent = Listener()
    server = await asyncio.start_server(silent.serve, "127.0.0.1", 0)
    async with server:
        before = _open_sockets()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", ResourceWarning)
            port = server.sockets[0].getsockname()[1]
            source = ZooKeeperTokens(f"127.0.0.1:{port}", timeout=60.0, connect_timeout=1.0)
            read = asyncio.create_task(source.upper_bound(resource))
            await eventually(lambda: silent.accepted >= 1, what="the source connecting")
            read.cancel()
            await asyncio.sleep(0)  # one step: the read leaves kazoo's start and begins to clean up
            read.cancel()
            with pytest.raises(asyncio.CancelledError):
                await read
            await source.aclose()
            await eventually(
                lambda: _open_sockets() == before, within=15.0, what="the client's sockets closing"
            )
            gc.collect()
        assert [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)] == []


async def test_postgres_refuses_a_cached_sequence(pg_dsn: str, resource: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("CREATE SEQUENCE fencegate_tokens CACHE 20")
    finally:
        await conn.close()
    async with PostgresTokens(pg_dsn) as source:
        with pytest.raises(ConfigurationError, match="CACHE 1"):
            await source.next_token(resource)


async def test_postgres_creates_its_sequence_with_cache_one(pg_dsn: str, resource: str) -> None:
    async with PostgresTokens(pg_dsn) as source:
        assert await source.upper_bound(resource) == 0
        assert await source.next_token(resource) == 1
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert (
            await conn.fetchval("SELECT cache_size FROM pg_sequences WHERE sequencename = 'fencegate_tokens'")
            == 1
        )
    finally:
        await conn.close()


async def test_sources_opening_a_new_sqlite_file_at_once_all_draw(tmp_path: Path, resource: str) -> None:
    """Processes started together on one new token file: the first switch to WAL does not wait out
    the busy timeout, so without a retry one of them fails with "database is locked"."""
    for round_ in range(300):
        sources = [SQLiteTokens(tmp_path / f"{round_}.db") for _ in range(4)]
        try:
            tokens = await asyncio.gather(*(source.next_token(resource) for source in sources))
        finally:
            await asyncio.gather(*(source.aclose() for source in sources))
        assert sorted(tokens) == [1, 2, 3, 4], f"round {round_}"


async def test_unreachable_sources_raise_token_source_error_with_the_fix(
    tmp_path: Path, resource: str
) -> None:
    async with SQLiteTokens(tmp_path / "missing-dir" / "tokens.db") as sqlite:
        with pytest.raises(TokenSourceError, match="writable") as caught:
            await sqlite.next_token(resource)
        assert caught.value.source == "sqlite"
    async with PostgresTokens("postgresql://postgres@127.0.0.1:1/none", timeout=2.0) as postgres:
        with pytest.raises(TokenSourceError, match="reachable"):
            await postgres.next_token(resource)
    async with ZooKeeperTokens("127.0.0.1:1", timeout=0.5) as zookeeper:
        with pytest.raises(TokenSourceError, match="ZooKeeper is running"):
            await zookeeper.next_token(resource)


def test_open_token_source_reads_each_url_form() -> None:
    sqlite = open_token_source("sqlite:////var/lib/fencegate/tokens.db")
    assert isinstance(sqlite, SQLiteTokens)
    assert sqlite.path == "/var/lib/fencegate/tokens.db"
    relative = open_token_source("sqlite:///tokens.db")
    assert isinstance(relative, SQLiteTokens)
    assert relative.path == "tokens.db"
    assert isinstance(open_token_source("postgresql://u@h:5432/db"), PostgresTokens)
    zk = open_token_source("zookeeper://h1:2181,h2:2181/app")
    assert isinstance(zk, ZooKeeperTokens)
    assert (zk.hosts, zk.chroot) == ("h1:2181,h2:2181", "/app")
    assert isinstance(open_token_source("redis://h:6379?unsafe=1"), RedisIncrTokens)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://127.0.0.1:6379", "UNSAFE.*unsafe=1"),
        ("sqlite://", "names no file"),
        ("sqlite:///:memory:", "cannot be shared"),
        ("mysql://h/db", "unknown token source"),
        ("zookeeper:///chroot", "host:port"),
    ],
)
def test_bad_token_urls_say_how_to_fix_them(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_token_source(url)


async def test_postgres_tokens_keep_increasing_across_a_restart(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], resource: str
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, postgres=True))
    async with PostgresTokens(cluster.postgres_dsn, pool_size=2) as source:
        before, after = await across_a_restart(cluster, "postgres-0", source, resource)  # a dead pool
        assert before == [1, 2, 3]
        assert after[0] > before[-1]
        assert after == sorted(after)


QUEUED = 8  # requests' worth of draws queued behind the first one


async def all_give_up_in_time(source: TokenSource, resource: str, count: int, within: float) -> None:
    """`count` draws at once from a source whose server does not answer: each must raise
    `TokenSourceError` by its own timeout. `within` is a deadline on the test, far inside the wait
    of draws that waited a timeout per request queued ahead of theirs."""
    try:
        async with asyncio.timeout(within):
            draws = (source.next_token(resource) for _ in range(count))
            outcomes = await asyncio.gather(*draws, return_exceptions=True)
    except TimeoutError:
        pytest.fail(f"draws were still waiting {within} s after they began")
    assert all(isinstance(outcome, TokenSourceError) for outcome in outcomes)


async def draws_give_up_while_paused(
    cluster: LocalCluster, node: str, source: PostgresTokens | ZooKeeperTokens, resource: str, per_round: int
) -> None:
    """With `node` paused, QUEUED rounds of `per_round` draws at timeout 2 s each give up in time; once
    it resumes, the source draws again, above its token from before."""
    first = await source.next_token(resource)
    source.timeout = 2.0
    await asyncio.to_thread(cluster.pause, node)
    try:
        await all_give_up_in_time(source, resource, QUEUED * per_round, within=8.0)
    finally:
        await asyncio.to_thread(cluster.resume, node)
    source.timeout = 60.0
    assert await source.next_token(resource) > first


async def test_a_postgres_draw_waits_its_timeout_not_one_per_statement_queued_before_it(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], resource: str
) -> None:
    """On a paused server each statement waits the whole timeout, and SQLAlchemy then closes the
    cancelled connection gracefully (up to 2 s more); a draw queued behind 8 of them waited them all
    (2 + 2 + 8 * 2 s here)."""
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, postgres=True))
    async with PostgresTokens(cluster.postgres_dsn, timeout=60.0) as source:
        await draws_give_up_while_paused(cluster, "postgres-0", source, resource, postgres_tokens.MAX_BATCH)


async def test_a_zookeeper_draw_waits_its_timeout_not_one_per_multi_queued_before_it(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], resource: str
) -> None:
    """Draws for one resource never share a multi, and only 4 multis are out at once; on a paused
    server each retries for the whole timeout, so a draw queued behind 8 rounds of them waited them
    all (8 * 2 s here)."""
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, zookeeper=True))
    async with ZooKeeperTokens(cluster.zookeeper, timeout=60.0, connect_timeout=1.0) as source:
        await draws_give_up_while_paused(cluster, "zookeeper-0", source, resource, zookeeper_tokens.IN_FLIGHT)


async def test_redis_incr_draws_and_reads_give_up_at_their_timeout_on_a_paused_node(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], resource: str
) -> None:
    """A draw and a read of the bound answer by the source's `timeout`, not by redis-py's socket
    timeout: 5 s in redis-py 8, none before it (>= 5.0 is supported), so they waited until the node
    answered again."""
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=1))
    async with RedisIncrTokens(cluster.redis_urls[0], unsafe=True, timeout=60.0) as source:
        first = await source.next_token(resource)
        source.timeout = 1.0
        await asyncio.to_thread(cluster.pause, "redis-0")
        try:
            await all_give_up_in_time(source, resource, 8, within=3.0)
            with pytest.raises(TokenSourceError, match="within 1 s"):
                async with asyncio.timeout(3.0):
                    await source.upper_bound(resource)
        finally:
            await asyncio.to_thread(cluster.resume, "redis-0")
        source.timeout = 60.0
        assert await source.next_token(resource) > first
        assert await source.upper_bound(resource) > first


async def test_zookeeper_bounds_wait_their_timeout_not_one_per_read_queued_before_them(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], resource: str
) -> None:
    """Each read runs on one of the source's 16 threads and retries for the whole timeout on a paused
    server, so the last of 96 reads at once waited six rounds of them (6 * 2 s here)."""
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, zookeeper=True))
    async with ZooKeeperTokens(cluster.zookeeper, timeout=60.0, connect_timeout=1.0) as source:
        first = await source.next_token(resource)
        source.timeout = 2.0
        await asyncio.to_thread(cluster.pause, "zookeeper-0")
        try:
            async with asyncio.timeout(8.0):
                reads = (source.upper_bound(resource) for _ in range(6 * zookeeper_tokens.WORKERS))
                outcomes = await asyncio.gather(*reads, return_exceptions=True)
        finally:
            await asyncio.to_thread(cluster.resume, "zookeeper-0")
        assert all(isinstance(outcome, TokenSourceError) for outcome in outcomes)
        source.timeout = 60.0
        assert await source.upper_bound(resource) >= first


async def test_a_sqlite_draw_waits_its_busy_timeout_not_one_per_transaction_queued_before_it(
    tmp_path: Path, resource: str
) -> None:
    """While another writer holds the lock, each transaction waits the whole busy timeout; a draw
    queued behind 8 of them waited them all (2 + 8 * 2 s here)."""
    path = tmp_path / "tokens.db"
    async with SQLiteTokens(path, busy_timeout=2.0) as source:
        first = await source.next_token(resource)
        writer = sqlite3.connect(path, isolation_level=None)  # as another process would, stuck mid-write
        writer.execute("BEGIN IMMEDIATE")
        try:
            await all_give_up_in_time(source, resource, QUEUED * sqlite_tokens.MAX_BATCH, within=8.0)
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        assert await source.next_token(resource) > first


async def test_a_zookeeper_source_revives_a_client_whose_connection_loop_stopped(
    zookeeper_cluster: LocalCluster, resource: str
) -> None:
    async with ZooKeeperTokens(zookeeper_cluster.zookeeper) as source:
        first = await source.next_token(resource)
        # kazoo's connection loop can give up during a long outage; stopping it behind the source's back
        # leaves the client in the same CLOSED state
        await asyncio.to_thread(source._client.stop)
        assert await source.next_token(resource) > first


@pytest.mark.parametrize(
    "build",
    [
        lambda: ZooKeeperTokens("127.0.0.1:2181", connect_timeout=0),
        lambda: ZooKeeperTokens("127.0.0.1:2181", timeout=-1.0),
        lambda: EtcdTokens("127.0.0.1:2379", request_timeout=0),
        lambda: PostgresTokens("postgresql://u@127.0.0.1/db", timeout=0),
        lambda: PostgresTokens("postgresql://u@127.0.0.1/db", timeout=-5.0),
        lambda: SQLiteTokens("tokens.db", busy_timeout=-1.0),
    ],
)
def test_timeouts_that_are_not_positive_are_refused(build: Callable[[], object]) -> None:
    with pytest.raises(ConfigurationError, match="timeouts must be positive seconds"):
        build()
