"""Plain reads against hostile or unlucky clients and operators.

Reads cancelled by the request's deadline in the middle of a round trip or
while they wait for a reader, reader connections killed by the operator, a
reader thread stuck or shut down with reads queued, and rows tampered with
in the store: afterwards the readers serve again, none lost or doubled, and
no answer carries internals.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from gateway.app_keys import AppKeys
from storage.errors import StorageUnavailable
from storage.postgresql.group_commit import PgGroupCommitStore
from storage.postgresql.reader import DEFAULT_READERS, PgReader
from storage.protocols import ObjectData
from storage.sqlite.group_commit import GroupCommitStore
from storage.sqlite.reader import SqliteReader
from tests.gateway.conftest import AppClient, MakeClient
from tests.gateway.test_internals import answer, assert_clean, logged
from tests.gateway.test_storage_down import hung
from tests.waiting import eventually

STORM = 120  # requests cancelled at once


@pytest.fixture
async def private_postgres(cluster_factory: Callable[[ClusterSpec], LocalCluster]) -> LocalCluster:
    return await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, postgres=True))


async def _statuses(client: AppClient, path: str, n: int) -> list[int]:
    async def one() -> int:
        resp = await client.get(path)
        await resp.read()
        return resp.status

    return list(await asyncio.gather(*(one() for _ in range(n))))


def _pg_reader(client: AppClient) -> PgReader:
    store = client.app[AppKeys.store]
    assert isinstance(store, PgGroupCommitStore)
    return store._reader


def _lanes_intact(reader: PgReader) -> None:
    """Every lane back in the queue, each once."""
    queued = list(reader._lanes._queue)  # type: ignore[attr-defined]  # the test looks inside the queue
    assert len(queued) == DEFAULT_READERS, len(queued)
    assert {id(lane) for lane in queued} == {id(lane) for lane in reader._all}


async def test_a_storm_of_reads_cut_by_the_request_deadline_on_a_hung_postgres_leaves_readers_serving(
    make_client: MakeClient, private_postgres: LocalCluster, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Four reads are cut in the middle of `fetchrow`, the rest while they wait for a connection:
    each is 503 at the request's deadline; once PostgreSQL runs again every read is served."""
    caplog.set_level("INFO")
    client = await make_client(
        storage=private_postgres.postgres_dsn, storage_timeout=20.0, request_timeout=0.5
    )
    key = f"/v1/objects/{unique}"
    assert (await client.put(key, data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    assert await _statuses(client, key, 8) == [200] * 8
    with hung(private_postgres):
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await _statuses(client, key, STORM) == [503] * STORM
        took = loop.time() - started
    assert took < 5.0, took  # the deadline holds: no read waits on the hung server past it
    async with asyncio.timeout(10):
        assert await _statuses(client, key, 40) == [200] * 40
    _lanes_intact(_pg_reader(client))
    assert "another operation is in progress" not in caplog.text


async def test_reader_connections_killed_by_the_operator_are_replaced_and_logged_once_each(
    make_client: MakeClient, private_postgres: LocalCluster, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="storage")
    dsn = private_postgres.postgres_dsn
    client = await make_client(storage=dsn, storage_timeout=5.0)
    key = f"/v1/objects/{unique}"
    assert (await client.put(key, data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    assert await _statuses(client, key, 16) == [200] * 16  # every reader connection opened
    for wait in (False, True, False, False):
        admin = await asyncpg.connect(dsn)
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND datname = current_database()"
            )
        finally:
            await admin.close()
        assert killed >= 1
        if wait:  # else the reads race the news of the kill
            await eventually(lambda: _gone(dsn), what="the killed backends gone")
        assert await _statuses(client, key, 60) == [200] * 60
    replaced = [r for r in caplog.records if "reader connection was broken" in r.getMessage()]
    assert 1 <= len(replaced) <= 4 * DEFAULT_READERS, len(replaced)
    _lanes_intact(_pg_reader(client))


async def _gone(dsn: str) -> bool:
    admin = await asyncpg.connect(dsn)
    try:
        others = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND datname = current_database()"
        )
    finally:
        await admin.close()
    return bool(others == 0)


async def test_a_postgres_read_after_close_opens_no_connection(
    make_client: MakeClient, private_postgres: LocalCluster, unique: str
) -> None:
    """After `aclose()` (shutdown) a read is a 503 and leaves no connection checked out of the pool."""
    client = await make_client(storage=private_postgres.postgres_dsn, storage_timeout=5.0)
    key = f"/v1/objects/{unique}"
    assert (await client.put(key, data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    store = client.app[AppKeys.store]
    assert isinstance(store, PgGroupCommitStore)
    await store.read(unique, resource=unique)
    await store.aclose()
    with pytest.raises(StorageUnavailable):
        await store.read(unique, resource=unique)
    assert store._engine.pool.checkedout() == 0  # type: ignore[attr-defined]


# -- SQLite -------------------------------------------------------------------


def _sqlite_reader(client: AppClient) -> SqliteReader:
    store = client.app[AppKeys.store]
    assert isinstance(store, GroupCommitStore)
    return store._reader


def _stall(reader: SqliteReader, monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """The reader thread's next read waits for `release` (a disk that stalls); `reached` when it does."""
    reached, release = threading.Event(), threading.Event()
    select = reader._select

    def slow(db: sqlite3.Connection, key: str) -> Any:
        reached.set()
        release.wait(20)
        return select(db, key)

    monkeypatch.setattr(reader, "_select", slow)
    return reached, release


async def test_a_storm_of_sqlite_reads_cut_by_the_request_deadline_leaves_the_reader_serving(
    make_client: MakeClient, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await make_client(request_timeout=0.5)
    key = f"/v1/objects/{unique}"
    assert (await client.put(key, data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    reader = _sqlite_reader(client)
    reached, release = _stall(reader, monkeypatch)
    assert await _statuses(client, key, STORM) == [503] * STORM
    assert reached.is_set()
    monkeypatch.undo()
    release.set()
    async with asyncio.timeout(5):
        assert await _statuses(client, key, 40) == [200] * 40
    assert reader._thread is not None
    assert reader._thread.is_alive()


async def test_sqlite_shutdown_with_reads_queued_answers_each_and_ends_the_thread(
    make_client: MakeClient, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await make_client()
    key = f"/v1/objects/{unique}"
    assert (await client.put(key, data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    store = client.app[AppKeys.store]
    assert isinstance(store, GroupCommitStore)
    reader = store._reader
    thread = reader._thread
    assert thread is not None
    reached, release = _stall(reader, monkeypatch)
    reads = [asyncio.ensure_future(store.read(unique, resource=unique)) for _ in range(20)]
    assert await asyncio.to_thread(reached.wait, 10)
    closing = asyncio.ensure_future(store.aclose())
    late = asyncio.ensure_future(store.read(unique, resource=unique))
    release.set()
    async with asyncio.timeout(10):
        await closing
        outcomes = await asyncio.gather(*reads, late, return_exceptions=True)
    for outcome in outcomes:  # served, or refused because the reader had stopped
        assert isinstance(outcome, ObjectData | StorageUnavailable), outcome
    assert not thread.is_alive()


@pytest.mark.parametrize(
    "tamper",
    [
        "version = 'x'",
        "token = 'x', version = 2.5",
        "data = 12345",
        "content_type = x'ff00'",
        "content_type = 'text/plain\r\nX-Injected: 1'",
        "size = -1",
        "digest = x'00'",
    ],
)
async def test_a_tampered_sqlite_row_is_a_clean_5xx_and_the_reader_goes_on(
    make_client: MakeClient, unique: str, tamper: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A value fencegate never writes (SQLite keeps any value in any column) is a 503 naming nothing,
    the log says which column: never a 200 that passes it on, a 500, or a dropped connection."""
    client = await make_client()
    good, bad = f"/v1/objects/{unique}-good", f"/v1/objects/{unique}"
    for path in (good, bad):
        assert (await client.put(path, data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    db = sqlite3.connect(client.app[AppKeys.settings].storage_url.removeprefix("sqlite:///"))
    try:
        db.execute(f"UPDATE fencegate_objects SET {tamper} WHERE key = ?", (unique,))  # noqa: S608
        db.commit()
    finally:
        db.close()
    status, raw, headers = await answer(await client.get(bad))
    request_id = assert_clean(status, raw, headers, code="storage_unavailable", markers=(unique,))
    logged(caplog, request_id, "MalformedRow")
    head = await client.head(bad)
    assert (head.status, await head.read()) == (503, b"")
    assert (await client.get(good)).status == 200  # the reader goes on


async def test_a_read_cut_twice_on_a_hung_postgres_leaves_no_connection_checked_out(
    make_client: MakeClient, private_postgres: LocalCluster, unique: str
) -> None:
    """The read's own deadline cuts `fetchrow`; the request's cuts the dropping of the connection
    that follows (a graceful close the hung server never answers): the pool gets its slot back."""
    client = await make_client(
        storage=private_postgres.postgres_dsn, storage_timeout=0.5, request_timeout=0.8
    )
    key = f"/v1/objects/{unique}"
    assert (await client.put(key, data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    assert await _statuses(client, key, 8) == [200] * 8
    with hung(private_postgres):
        assert await _statuses(client, key, 8) == [503] * 8
    async with asyncio.timeout(10):
        assert await _statuses(client, key, 8) == [200] * 8
    store = client.app[AppKeys.store]
    assert isinstance(store, PgGroupCommitStore)
    pool: Any = store._engine.pool
    kept = sum(lane.open for lane in store._reader._all)
    await eventually(
        lambda: pool.checkedout() <= kept + store._lanes, what="every dropped connection checked in"
    )


async def test_reader_connections_use_tls_like_every_other(
    make_client: MakeClient, postgres_tls_cluster: LocalCluster, unique: str
) -> None:
    client = await make_client(storage=postgres_tls_cluster.postgres_dsn)
    key = f"/v1/objects/{unique}"
    assert (await client.put(key, data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    assert await _statuses(client, key, 16) == [200] * 16
    store = client.app[AppKeys.store]
    assert isinstance(store, PgGroupCommitStore)
    assert all(lane.open for lane in store._reader._all)
    async with store._engine.connect() as conn:  # TLS itself: the test's own connection is counted too
        plain, tls = (
            await conn.execute(
                text(
                    "SELECT count(*) FILTER (WHERE NOT s.ssl OR s.client_dn IS DISTINCT FROM '/CN=postgres'),"
                    " count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
                    "WHERE a.datname = current_database() AND a.backend_type = 'client backend'"
                )
            )
        ).one()
    assert plain == 0
    assert tls >= DEFAULT_READERS + 1
