"""Gateway apps for pytest-aiohttp, on a fresh SQLite file per test; fresh PostgreSQL databases.

A test whose keys are drawn (schemathesis) or that changes database settings
takes a database of its own on the session's PostgreSQL (`create_database`),
so its marks meet no other test's.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.gateway import GatewayProcess
from gateway import Settings, create_app
from lockclient.protocols import TokenSource
from tests.gateway.s3_support import fresh_prefix, use_store

AppClient = TestClient[web.Request, web.Application]
MakeClient = Callable[..., Awaitable[AppClient]]


@dataclass(frozen=True)
class Lease:
    """A stand-in for a lockclient lease: all the gateway client needs is token and resource."""

    token: int
    resource: str


@pytest.fixture
def s3_store(s3_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """The session's SeaweedFS (bucket, endpoint, keys), with this test's AWS environment pointed at it."""
    use_store(monkeypatch, s3_cluster.s3, tmp_path)
    return s3_cluster.s3


@pytest.fixture
def s3_prefix() -> str:
    return fresh_prefix()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path)


@pytest.fixture
async def make_client(aiohttp_client: Any, tmp_path: Path) -> MakeClient:
    """`await make_client(tokens=..., **settings)`: a test client over a fresh app."""

    async def make(*, tokens: TokenSource | None = None, **overrides: Any) -> AppClient:
        settings = Settings(**{"data_dir": tmp_path, **overrides})
        client: AppClient = await aiohttp_client(create_app(settings, tokens=tokens))
        return client

    return make


@pytest.fixture
async def client(make_client: MakeClient) -> AppClient:
    return await make_client()


@pytest.fixture
def unique() -> str:
    return f"u{uuid.uuid4().hex[:10]}"


@pytest.fixture(
    params=["sqlite-group-commit", "sqlite-per-request", "postgresql-group-commit", "postgresql-per-request"]
)
async def engine_client(request: pytest.FixtureRequest, make_client: MakeClient) -> AppClient:
    """A test client on each engine and mode: SQLite and the suite's shared PostgreSQL (use unique
    names there), each with group commit and with one transaction per request."""
    engine, mode = request.param.split("-", 1)
    overrides: dict[str, Any] = {"group_commit": 0} if mode == "per-request" else {}
    if engine == "postgresql":
        cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
        overrides["storage"] = cluster.postgres_dsn
    return await make_client(**overrides)


@pytest.fixture(
    scope="module",
    params=["sqlite", "postgresql-group-commit", "postgresql-one-lane", "postgresql-per-request"],
)
def replicas(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two `fencegate serve` processes on one database (their URLs): one SQLite file with group
    commit in each, or the suite's shared PostgreSQL in either mode, group commit also with one
    batch in flight per replica (`--commit-lanes 1`, as docs/operations.md advises for several
    replicas). Shared by the module's tests (use unique names): a pair takes seconds to start."""
    tmp_path = tmp_path_factory.mktemp("replicas")
    if request.param == "sqlite":
        storage = ["--data-dir", str(tmp_path / "shared")]
    else:
        cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
        storage = ["--storage", cluster.postgres_dsn]
        if request.param.endswith("per-request"):
            storage += ["--group-commit", "0"]
        elif request.param.endswith("one-lane"):
            storage += ["--commit-lanes", "1"]
    procs = [GatewayProcess(tmp_path / f"gw{i}.log", *storage) for i in (1, 2)]
    try:  # both at once: migrations serialize on the database's lock, and a start takes seconds
        with ThreadPoolExecutor(len(procs)) as starting:
            urls = list(starting.map(GatewayProcess.start, procs))
        yield urls
    finally:
        for proc in procs:
            proc.stop()


async def create_database(admin_dsn: str, **settings: str) -> str:
    """A fresh, empty database next to `admin_dsn`'s, with server `settings` of its own; its DSN."""
    name = f"gw_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
        for setting, value in settings.items():
            await conn.execute(f"ALTER DATABASE \"{name}\" SET {setting} = '{value}'")
    finally:
        await conn.close()
    return admin_dsn.rsplit("/", 1)[0] + f"/{name}"
