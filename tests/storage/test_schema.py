"""The schema is versioned, created by the project, and a newer one is refused."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer
from sqlalchemy import select, update

from fencegate.lab.cluster import LocalCluster
from gateway import Settings, create_app
from storage import SCHEMA_VERSION, BadStorageURL, SchemaError, migrate, open_engine
from storage.models import SchemaVersion
from storage.sqlite.batch_writer import BatchWriter


async def test_migrate_creates_then_is_idempotent(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 's.db'}")
    try:
        assert await migrate(engine) == SCHEMA_VERSION
        assert await migrate(engine) == SCHEMA_VERSION
    finally:
        await engine.dispose()


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 's.db'}")
    try:
        await migrate(engine)
        async with engine.begin() as conn:
            await conn.execute(update(SchemaVersion).values(version=SCHEMA_VERSION + 1))
        with pytest.raises(SchemaError, match="upgrade fencegate"):
            await migrate(engine)
    finally:
        await engine.dispose()


async def test_a_gateway_refused_at_start_says_why_and_nothing_about_a_chain_it_never_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The head is logged at shutdown to be kept apart: a gateway that never served has none to give."""
    engine = open_engine(f"sqlite:///{tmp_path / 'fencegate.db'}")
    try:
        await migrate(engine)
        async with engine.begin() as conn:
            await conn.execute(update(SchemaVersion).values(version=SCHEMA_VERSION + 1))
    finally:
        await engine.dispose()
    server = TestServer(create_app(Settings(data_dir=tmp_path)))
    try:
        with caplog.at_level("INFO", logger="gateway"), pytest.raises(SchemaError, match="upgrade fencegate"):
            await server.start_server()
    finally:
        await server.close()
    assert "not ready" in caplog.text
    assert "chain head" not in caplog.text


async def test_sqlite_runs_wal_with_full_sync(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 's.db'}")
    try:
        async with engine.connect() as conn:
            mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
            sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
        assert (mode, sync) == ("wal", 2)  # 2 is FULL
    finally:
        await engine.dispose()


async def test_engines_opening_a_new_sqlite_file_at_once_all_migrate_it(tmp_path: Path) -> None:
    """Replicas started together on one new file: the first switch to WAL does not wait out the
    busy timeout, so without a retry one of them fails with "database is locked"."""
    for round_ in range(100):
        url = f"sqlite:///{tmp_path / f'{round_}.db'}"
        engines = [open_engine(url) for _ in range(4)]
        try:
            versions = await asyncio.gather(*(migrate(engine) for engine in engines))
        finally:
            await asyncio.gather(*(engine.dispose() for engine in engines))
        assert versions == [SCHEMA_VERSION] * 4, f"round {round_}"


def _open_together(writer: BatchWriter, start: threading.Barrier) -> None:
    start.wait()
    writer.open()


def test_group_commit_writers_opening_a_new_sqlite_file_at_once_all_get_wal(tmp_path: Path) -> None:
    for round_ in range(200):
        path = str(tmp_path / f"{round_}.db")
        writers = [BatchWriter(path, busy_timeout=5.0) for _ in range(4)]
        start = threading.Barrier(len(writers))
        try:
            with ThreadPoolExecutor(len(writers)) as pool:
                list(pool.map(_open_together, writers, [start] * len(writers)))  # re-raises a failure
        finally:
            for writer in writers:
                writer.close()
        with closing(sqlite3.connect(path)) as db:
            assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",), f"round {round_}"


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "mysql://x@y/z", "not a url"])
def test_unusable_urls_are_refused_with_the_fix(url: str) -> None:
    with pytest.raises(BadStorageURL, match="sqlite:///"):
        open_engine(url)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://fg:s3cret-pw@db:99999/fg",
        "postgresql://fg:s3cret-pw@[::1/fg",
        "postgresql://fg:s3cret-pw@db:port/fg",
        "mysql://fg:s3cret-pw@db/fg",
        "sqlite://fg:s3cret-pw@/",
    ],
)
def test_a_refused_url_is_never_repeated_in_the_error(url: str) -> None:
    """The message says what is wrong; the URL (and its password) stays with the caller, who masks it."""
    with pytest.raises(BadStorageURL) as refused:
        open_engine(url)
    assert "s3cret" not in str(refused.value)
    assert "fg:" not in str(refused.value)


async def test_gateways_starting_at_once_on_a_fresh_postgres_migrate_once(
    postgres_cluster: LocalCluster,
) -> None:
    name = f"fg_{uuid.uuid4().hex[:10]}"
    admin = open_engine(postgres_cluster.postgres_dsn)
    try:
        async with admin.connect() as conn:
            _ = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        await admin.dispose()
    url = postgres_cluster.postgres_dsn.rsplit("/", 1)[0] + f"/{name}"
    engines = [open_engine(url) for _ in range(4)]
    try:
        assert await asyncio.gather(*(migrate(e) for e in engines)) == [SCHEMA_VERSION] * 4
        async with engines[0].connect() as conn:
            rows = (await conn.execute(select(SchemaVersion.version))).scalars().all()
        assert rows == [SCHEMA_VERSION]
    finally:
        for engine in engines:
            await engine.dispose()


@pytest.mark.parametrize(
    "tables",
    [
        ["CREATE TABLE fencegate_objects (id INTEGER PRIMARY KEY, name TEXT)"],  # another program's
        ["CREATE TABLE fencegate_fences (resource TEXT PRIMARY KEY, token BIGINT, updated_at TEXT)"],
    ],
)
async def test_tables_of_our_names_without_a_schema_version_are_refused_and_left_alone(
    tmp_path: Path, tables: list[str]
) -> None:
    """Without the version row nothing says what those tables hold; migrating them as new guessed."""
    path = tmp_path / "foreign.db"
    with closing(sqlite3.connect(path)) as db:
        for statement in [*tables, "CREATE TABLE users (id INTEGER)"]:
            db.execute(statement)
        db.commit()
        before = db.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    engine = open_engine(f"sqlite:///{path}")
    try:
        with pytest.raises(SchemaError, match="no schema version"):
            await migrate(engine)
    finally:
        await engine.dispose()
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall() == before


async def test_a_database_of_other_tables_gets_fencegates_beside_them(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE users (id INTEGER)")
    engine = open_engine(f"sqlite:///{path}")
    try:
        assert await migrate(engine) == SCHEMA_VERSION
    finally:
        await engine.dispose()
