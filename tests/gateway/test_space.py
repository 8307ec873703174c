"""Deleted objects free their space: a SQLite store shrinks after deletes, and stops growing under
overwrites and deletes; PostgreSQL's write-heavy tables vacuum early.

Through the HTTP API on a real SQLite file (the gateway sweeps every second
with a one-second TTL), reading the file's own page counts; and on the
suite's PostgreSQL, reading the tables' storage parameters from `pg_class`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path

import asyncpg

from fencegate.lab.cluster import LocalCluster
from gateway.durations import Duration
from gateway.storage_tls import open_storage
from storage import migrate
from storage.sqlite.vacuum import auto_vacuum_mode, reclaim
from tests.databases import fresh_database
from tests.gateway.conftest import AppClient, MakeClient
from tests.waiting import eventually

OBJECTS = 150
BODY = b"x" * 20_000  # five pages each: what the deletes free is far above the trail's growth


def pages(path: Path) -> tuple[int, int]:
    """The file's (page count, free pages), read as SQLite keeps them."""
    db = sqlite3.connect(path)
    try:
        return db.execute("PRAGMA page_count").fetchone()[0], db.execute("PRAGMA freelist_count").fetchone()[
            0
        ]
    finally:
        db.close()


async def write_all(client: AppClient, prefix: str, method: str, token: int) -> None:
    async def one(n: int) -> None:
        url, headers = f"/v1/objects/{prefix}/{n}", {"Fencing-Token": str(token), "Fencing-Resource": prefix}
        resp = await (
            client.put(url, data=BODY, headers=headers)
            if method == "PUT"
            else client.delete(url, headers=headers)
        )
        assert resp.status in (200, 201), await resp.text()

    await asyncio.gather(*(one(n) for n in range(OBJECTS)))


async def test_deletes_and_overwrites_give_pages_back_and_the_file_stops_growing(
    make_client: MakeClient, tmp_path: Path
) -> None:
    client = await make_client(idempotency_ttl=Duration(1))
    path, prefix = tmp_path / "fencegate.db", f"s{uuid.uuid4().hex[:8]}"
    assert auto_vacuum_mode(str(path)) == 2  # a new store is made incremental
    peaks = []
    for round_ in range(1, 5):
        await write_all(client, prefix, "PUT", round_)
        await write_all(client, prefix, "PUT", round_)  # an overwrite frees the old value's pages
        peaks.append(pages(path)[0])
        await write_all(client, prefix, "DELETE", round_)

        async def given_back(peak: int = peaks[-1]) -> bool:
            count, free = pages(path)
            return free == 0 and count < peak // 2

        await eventually(given_back, within=30.0, what=f"the pages of round {round_}'s deletes given back")
    assert max(peaks[1:]) <= peaks[0] * 1.25, peaks  # later rounds reuse the space, not add to it


async def test_a_file_made_without_auto_vacuum_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE t (x BLOB)")
    db.execute("INSERT INTO t VALUES (randomblob(100000))")
    db.execute("DELETE FROM t")
    db.close()
    assert auto_vacuum_mode(str(path)) == 0
    assert await reclaim(str(path)) == 0
    assert pages(path)[1] > 0  # its free pages stay for reuse; the one-time VACUUM gives them back


async def test_postgresql_vacuums_the_write_heavy_tables_early(postgres_cluster: LocalCluster) -> None:
    async with fresh_database(postgres_cluster, "space") as dsn:
        engine = open_storage(dsn)
        try:
            await migrate(engine)
        finally:
            await engine.dispose()
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "SELECT relname, reloptions FROM pg_class WHERE relname = ANY($1::text[])",
                ["fencegate_objects", "fencegate_fences", "fencegate_idempotency", "fencegate_audit"],
            )
        finally:
            await conn.close()
    assert len(rows) == 4
    for row in rows:
        assert "autovacuum_vacuum_scale_factor=0.01" in row["reloptions"], row


async def test_the_tables_rows_and_bytes_are_metrics(make_client: MakeClient) -> None:
    client = await make_client()
    resp = await client.put("/v1/objects/sized", data=b"x", headers={"Fencing-Token": "1"})
    assert resp.status == 201

    async def measured() -> bool:
        text = await (await client.get("/metrics")).text()
        return all(
            f'fencegate_table_{what}{{table="{table}"}}' in text
            for what in ("rows", "bytes")
            for table in ("fencegate_objects", "fencegate_bindings", "fencegate_fences", "fencegate_audit")
        )

    await eventually(measured, what="the table size gauges")
