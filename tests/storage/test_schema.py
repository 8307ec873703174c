"""The schema is versioned, created by the project, and a newer one is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import update

from storage import SCHEMA_VERSION, SchemaError, migrate, open_engine
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


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "mysql://x@y/z"])
def test_unusable_urls_are_refused_with_the_fix(url: str) -> None:
    with pytest.raises(SchemaError, match="sqlite:///"):
        open_engine(url)
