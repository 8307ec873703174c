"""The naive yardsticks fence and are durable, or group commit would be compared with less work.

`bench.baseline naive` and `naive-postgresql` are the goals' denominators:
each must refuse a token below the mark (409) and keep the accepted value
when it answers.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import aiohttp
import asyncpg

from fencegate.bench.servers import http_server
from fencegate.lab.cluster import LocalCluster


async def test_naive_yardstick_refuses_a_stale_token_and_keeps_the_accepted_value(tmp_path: Path) -> None:
    db = tmp_path / "naive.db"
    with http_server(["fencegate.bench.baseline", "naive", "--db", str(db)], tmp_path / "naive.log") as (
        url,
        _pid,
    ):
        async with aiohttp.ClientSession(url) as session:
            statuses = []
            for token, value in ((5, b"five"), (3, b"three"), (5, b"five again"), ("x", b"bad")):
                async with session.put(
                    "/v1/objects/k", data=value, headers={"Fencing-Token": str(token)}
                ) as r:
                    statuses.append(r.status)
    assert statuses == [201, 409, 201, 400]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT data FROM objects WHERE key = 'k'").fetchone() == (b"five again",)
        assert conn.execute("SELECT token FROM fences WHERE resource = 'k'").fetchone() == (5,)


async def test_naive_postgresql_yardstick_fences_by_the_named_resource(
    postgres_cluster: LocalCluster, tmp_path: Path
) -> None:
    dsn = postgres_cluster.postgres_dsn.replace("postgresql+asyncpg://", "postgresql://", 1)
    resource, key = f"r{uuid.uuid4().hex[:8]}", f"k{uuid.uuid4().hex[:8]}"
    argv = ["fencegate.bench.baseline", "naive-postgresql", "--dsn", dsn]
    with http_server(argv, tmp_path / "naive.log") as (url, _pid):
        async with aiohttp.ClientSession(url) as session:
            statuses = []
            for token, value in ((5, b"five"), (3, b"three"), (5, b"five again"), ("x", b"bad")):
                headers = {"Fencing-Token": str(token), "Fencing-Resource": resource}
                async with session.put(f"/v1/objects/{key}", data=value, headers=headers) as r:
                    statuses.append(r.status)
    assert statuses == [201, 409, 201, 400]
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT data FROM naive_objects WHERE key = $1", key) == b"five again"
        assert await conn.fetchval("SELECT token FROM naive_fences WHERE resource = $1", resource) == 5
    finally:
        await conn.close()
