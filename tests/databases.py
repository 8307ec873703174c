"""Databases for tests: a store over a migrated engine, and a fresh PostgreSQL database of its own
on the suite's shared server, for tests whose data must not meet another test's (a fence
violation made on purpose, an old schema, a whole-trail check)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from fencegate.lab.cluster import LocalCluster
from gateway.storage_tls import open_storage
from storage import SqlObjectStore, migrate


@contextlib.asynccontextmanager
async def migrated_store(url: str) -> AsyncIterator[SqlObjectStore]:
    """A store over a fresh engine on `url`, its schema migrated; the engine is disposed afterwards."""
    engine = open_storage(url)
    await migrate(engine)
    try:
        yield SqlObjectStore(engine)
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def fresh_database(cluster: LocalCluster, prefix: str = "t") -> AsyncIterator[str]:
    """Create a database, yield its URL, drop it (connections and all) afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(cluster.postgres_dsn)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
        try:
            yield urlsplit(cluster.postgres_dsn)._replace(path=f"/{name}").geturl()
        finally:
            await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    finally:
        await admin.close()


ENGINES = ["sqlite", "postgresql"]  # the params of a fixture that runs a test on each engine


@contextlib.asynccontextmanager
async def engine_url(request: pytest.FixtureRequest, tmp_path: Path, prefix: str) -> AsyncIterator[str]:
    """A store URL for the fixture's engine param: a SQLite file under `tmp_path`, or a fresh
    database on the suite's PostgreSQL (`postgres_cluster`), dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
    async with fresh_database(cluster, prefix) as dsn:
        yield dsn


async def client_connections_tls(dsn: str) -> set[tuple[bool, str | None]]:
    """(TLS?, the client certificate's name) of every other client connection to the server at `dsn`."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT s.ssl, s.client_dn FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
            "WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    return {(row["ssl"], row["client_dn"]) for row in rows}
