"""Databases for the fence of the user's own tables: a fresh PostgreSQL database on the suite's server,
and a SQLite file, each with the marks table created as a deployment would (`create_marks`)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from fencegate.lab.cluster import LocalCluster
from lockclient.sql import create_marks
from lockclient.tokens.postgres import asyncpg_url
from tests.databases import fresh_database


@pytest.fixture
def resource() -> str:
    return f"orders/{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def pg_url(postgres_cluster: LocalCluster) -> AsyncIterator[str]:
    """A fresh database's SQLAlchemy URL (asyncpg), without the marks table."""
    async with fresh_database(postgres_cluster, prefix="own") as url:
        yield asyncpg_url(url)


@pytest.fixture(params=["postgresql", "sqlite"])
async def engine(
    request: pytest.FixtureRequest, postgres_cluster: LocalCluster, tmp_path: Path
) -> AsyncIterator[AsyncEngine]:
    """An async engine on each database, the marks table created."""
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "postgresql":
            url = asyncpg_url(await stack.enter_async_context(fresh_database(postgres_cluster, prefix="own")))
        else:
            url = f"sqlite+aiosqlite:///{tmp_path / 'own.db'}"
        made = create_async_engine(url)
        stack.push_async_callback(made.dispose)
        async with made.begin() as conn:
            await conn.run_sync(create_marks)
        yield made
