"""Plain reads (no Fencing-Token) on the readers of their own (`storage/postgresql/reader.py`,
`storage/sqlite/reader.py`).

They try to catch a read that is stale (a reader connection holding an old
snapshot), dirty (a batch that is then not committed), stuck (the writer's
lock, a hung server past `--storage-timeout`) or lost for good (PostgreSQL
restarted under kept connections), and a 503 that tells internals.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from gateway.app_keys import AppKeys
from storage.postgresql import group_commit as pgbatch
from storage.sqlite.group_commit import GroupCommitStore
from tests.gateway.conftest import AppClient, MakeClient
from tests.gateway.test_internals import answer, assert_clean
from tests.gateway.test_storage_down import PG, hung

ROUNDS = 40
READERS = 8
WRITES = 60


State = tuple[int, bytes, str | None, str | None]


async def _state(resp: aiohttp.ClientResponse | Any) -> State:
    headers = resp.headers
    return resp.status, await resp.read(), headers.get("Object-Version"), headers.get("Content-Type")


async def test_a_read_right_after_a_put_on_the_other_replica_sees_it(
    replicas: list[str], unique: str
) -> None:
    """Each PUT's 200 is followed at once by a GET on the other replica: it answers that version."""
    async with aiohttp.ClientSession() as session:
        for round_ in range(1, ROUNDS + 1):
            writer, reader = (replicas[0], replicas[1]) if round_ % 2 else (replicas[1], replicas[0])
            body = f"{unique}-{round_}".encode()
            headers = {"Fencing-Token": str(round_), "Content-Type": f"text/x-{round_}"}
            async with session.put(f"{writer}/v1/objects/{unique}", data=body, headers=headers) as put:
                assert put.status in (200, 201), await put.text()
            async with session.get(f"{reader}/v1/objects/{unique}") as got:
                assert await _state(got) == (200, body, str(round_), f"text/x-{round_}"), round_
            async with session.head(f"{reader}/v1/objects/{unique}") as head:
                assert (head.status, head.headers["Object-Version"]) == (200, str(round_))


async def test_many_gets_while_writes_go_on_answer_only_acknowledged_versions(
    engine_client: AppClient, unique: str
) -> None:
    """Every GET answers a version no older than the last one acknowledged before it was sent, whose
    body is that version's, and that was then acknowledged (no torn, stale or phantom read)."""
    key = f"/v1/objects/{unique}"
    assert (await engine_client.put(key, data=b"1", headers={"Fencing-Token": "1"})).status == 201
    acknowledged = 1
    writing = True

    async def write() -> None:
        nonlocal acknowledged, writing
        try:
            for version in range(2, WRITES + 1):
                put = await engine_client.put(key, data=str(version).encode(), headers={"Fencing-Token": "1"})
                assert (put.status, (await put.json())["version"]) == (200, version)
                acknowledged = version
        finally:
            writing = False

    async def read() -> list[tuple[int, int]]:
        seen: list[tuple[int, int]] = []
        while writing:
            floor = acknowledged
            got = await engine_client.get(key)
            status, body, version, _ = await _state(got)
            assert status == 200
            assert version is not None
            assert body == version.encode(), (body, version)
            seen.append((floor, int(version)))
        return seen

    readers = [asyncio.ensure_future(read()) for _ in range(READERS)]
    await write()
    answers = list(itertools.chain.from_iterable(await asyncio.gather(*readers)))
    assert len(answers) > WRITES  # the reads ran beside the writes
    for floor, version in answers:
        assert floor <= version <= WRITES, (floor, version)


@contextlib.contextmanager
def _failing_commit(store: GroupCommitStore, release: threading.Event) -> Iterator[threading.Event]:
    """The SQLite writer's next COMMIT waits for `release`, then fails (the batch rolls back)."""
    writer: Any = store._writer  # the test stands in for a disk failing the commit
    reached = threading.Event()

    def commit(*, expiry: object = None) -> None:  # the writer's signature: a batch may carry an expiry
        reached.set()
        release.wait(10)
        writer.rollback()
        raise sqlite3.OperationalError("disk I/O error (the test's)")

    writer.commit = commit
    try:
        yield reached
    finally:
        del writer.commit


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_read_beside_a_batch_that_then_fails_never_sees_its_write(
    engine: str,
    make_client: MakeClient,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    unique: str,
) -> None:
    """While a group commit has run its statements and waits to commit, GET and HEAD answer the
    committed object, at once; the commit fails (503), and the object is still the committed one."""
    overrides: dict[str, Any] = {}
    if engine == "postgresql":
        overrides["storage"] = request.getfixturevalue("postgres_cluster").postgres_dsn
    client = await make_client(**overrides)
    key = f"/v1/objects/{unique}"
    headers = {"Fencing-Token": "1", "Content-Type": "text/plain"}
    assert (await client.put(key, data=b"committed", headers=headers)).status == 201
    committed = (200, b"committed", "1", "text/plain")

    if engine == "sqlite":
        store = client.app[AppKeys.store]
        assert isinstance(store, GroupCommitStore)
        release = threading.Event()
        stack = contextlib.ExitStack()
        reached_commit = stack.enter_context(_failing_commit(store, release))

        async def wait_reached() -> None:
            assert await asyncio.to_thread(reached_commit.wait, 10)

        def let_go() -> None:
            release.set()
    else:
        appended = asyncio.Event()
        go = asyncio.Event()

        async def append(pg: Any, entries: Any) -> Any:  # the batch's statements ran; its commit is next
            appended.set()
            await go.wait()
            raise OSError("the connection broke before the commit (the test's)")

        monkeypatch.setattr(pgbatch, "append", append)
        stack = contextlib.ExitStack()

        async def wait_reached() -> None:
            await asyncio.wait_for(appended.wait(), 10)

        def let_go() -> None:
            go.set()

    with stack:
        doomed = asyncio.ensure_future(
            client.put(key, data=b"doomed", headers={"Fencing-Token": "2", "Content-Type": "text/x-doomed"})
        )
        await wait_reached()
        async with asyncio.timeout(5):  # a read does not wait for the batch either
            assert await _state(await client.get(key)) == committed
            head = await client.head(key)
            assert (head.status, head.headers["Object-Version"]) == (200, "1")
        let_go()
        assert (await doomed).status == 503
    assert await _state(await client.get(key)) == committed


async def test_a_sqlite_read_is_served_while_another_connection_holds_the_write_lock(
    make_client: MakeClient, unique: str
) -> None:
    client = await make_client()
    key = f"/v1/objects/{unique}"
    assert (await client.put(key, data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    path = client.app[AppKeys.settings].storage_url.removeprefix("sqlite:///")
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")  # in WAL mode: the write lock, readers go on
        other.execute("DELETE FROM fencegate_objects")  # uncommitted: no reader may see it
        async with asyncio.timeout(5):
            assert await _state(await client.get(key)) == (200, b"v1", "1", "application/octet-stream")
            assert (await client.get(f"/v1/objects/{unique}-none")).status == 404
        other.execute("ROLLBACK")
    finally:
        other.close()


@pytest.fixture
async def private_postgres(cluster_factory: Callable[[ClusterSpec], LocalCluster]) -> LocalCluster:
    """A PostgreSQL of this test's own: the test stops, restarts or pauses it."""
    return await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, postgres=True))


async def _gets(client: AppClient, key: str, n: int) -> list[State]:
    """`n` GETs at once, so that every reader connection is in use."""

    async def one() -> State:
        return await _state(await client.get(key))

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def test_postgres_stopped_is_a_clean_503_and_restarted_reads_are_served_at_once(
    make_client: MakeClient, private_postgres: LocalCluster, unique: str
) -> None:
    """Reader connections opened before a restart are dead after it: the next reads run again on
    fresh ones, with no wait for readiness and no restart of the gateway."""
    dsn = private_postgres.postgres_dsn
    client = await make_client(storage=dsn, storage_timeout=2.0)
    key = f"/v1/objects/{unique}"
    assert (await client.put(key, data=b"kept", headers={"Fencing-Token": "1"})).status == 201
    kept = (200, b"kept", "1", "application/octet-stream")
    assert await _gets(client, key, 16) == [kept] * 16

    await asyncio.to_thread(private_postgres.stop, PG)
    for path in (key, f"/v1/objects/{unique}-none"):
        status, raw, headers = await answer(await client.get(path))
        assert_clean(status, raw, headers, code="storage_unavailable", markers=(unique, dsn))

    await asyncio.to_thread(private_postgres.restart, PG)
    assert await _gets(client, key, 16) == [kept] * 16
    await asyncio.to_thread(private_postgres.stop, PG)
    await asyncio.to_thread(private_postgres.restart, PG)  # this time with every connection kept and dead
    assert await _gets(client, key, 16) == [kept] * 16
    assert (await client.get(f"/v1/objects/{unique}-none")).status == 404


async def test_a_read_on_a_hung_postgres_is_503_within_the_storage_timeout(
    make_client: MakeClient, private_postgres: LocalCluster, unique: str
) -> None:
    """A deadline is not a broken connection: the read is not run again, so `--storage-timeout`
    bounds it (the request's own deadline is far later)."""
    storage_timeout = 1.0
    client = await make_client(
        storage=private_postgres.postgres_dsn, storage_timeout=storage_timeout, request_timeout=30.0
    )
    key = f"/v1/objects/{unique}"
    assert (await client.put(key, data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    assert (await client.get(key)).status == 200
    with hung(private_postgres):
        started = time.monotonic()
        status, raw, headers = await answer(await client.get(key))
        took = time.monotonic() - started
    assert_clean(status, raw, headers, code="storage_unavailable", markers=(unique,))
    assert took < 1.8 * storage_timeout, took
