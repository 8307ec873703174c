"""The schema is versioned, created by the project, and a newer one is refused."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select, update

from fencegate.lab.cluster import LocalCluster
from storage import SCHEMA_VERSION, BadStorageURL, SchemaError, migrate, open_engine
from storage.models import SchemaVersion


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


async def test_sqlite_runs_wal_with_full_sync(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 's.db'}")
    try:
        async with engine.connect() as conn:
            mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
            sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
        assert (mode, sync) == ("wal", 2)  # 2 is FULL
    finally:
        await engine.dispose()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "mysql://x@y/z", "not a url"])
def test_unusable_urls_are_refused_with_the_fix(url: str) -> None:
    with pytest.raises(BadStorageURL, match="sqlite:///"):
        open_engine(url)


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
