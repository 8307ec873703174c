"""A fenced store on each backend: a fresh SQLite file, the shared PostgreSQL, and the shared
TLS-only PostgreSQL (reached with sslmode=verify-full and a client certificate).

Tests on the shared PostgreSQL use unique key and resource names (`names`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from fencegate.lab.cluster import LocalCluster
from storage import SqlObjectStore
from tests.databases import migrated_store


@pytest.fixture(params=["sqlite", "postgresql", "postgresql-tls"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    fixture = "postgres_tls_cluster" if request.param == "postgresql-tls" else "postgres_cluster"
    cluster: LocalCluster = request.getfixturevalue(fixture)
    return cluster.postgres_dsn


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[SqlObjectStore]:
    async with migrated_store(store_url) as store:
        yield store


@pytest.fixture
def names() -> Callable[[str], str]:
    """Unique names, so tests can share one database."""
    run = uuid.uuid4().hex[:12]
    return lambda name: f"t-{run}/{name}"
