"""Deleted objects free their space: a SQLite store shrinks after deletes, and stops growing under
overwrites and deletes; PostgreSQL's write-heavy tables vacuum early.

Through the HTTP API on a real SQLite file (the gateway sweeps every second
with a one-second TTL), reading the file's own page counts; a file made
without auto_vacuum is migrated at start, every object and the audit chain
kept; and on the
suite's PostgreSQL, reading the tables' storage parameters from `pg_class`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
import uuid
from pathlib import Path

import asyncpg
import pytest

from fencegate.lab.cluster import LocalCluster
from gateway.durations import Duration
from gateway.storage_tls import open_storage
from storage import SqlObjectStore, migrate, verify_audit
from storage.sqlite.vacuum import NotEnoughSpace, auto_vacuum_mode, migrate_to_incremental
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


async def old_store(path: Path) -> dict[str, bytes]:
    """A store as fencegate made it before auto_vacuum: objects written, half of them deleted again
    (free pages), a trail of accepted writes; the objects left, by key."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")  # the file's first page: the engine leaves auto_vacuum off
    db.close()
    engine = open_storage(f"sqlite:///{path}")
    try:
        await migrate(engine)
        store = SqlObjectStore(engine)
        for n in range(40):
            await store.put(f"old/{n}", bytes([n]) * (3000 + 97 * n), resource=f"old/{n}", token=n + 1)
        for n in range(0, 40, 2):
            await store.delete(f"old/{n}", resource=f"old/{n}", token=n + 1)
    finally:
        await engine.dispose()
    assert auto_vacuum_mode(str(path)) == 0
    assert pages(path)[1] > 0
    return objects(path)


def objects(path: Path) -> dict[str, bytes]:
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT key, data FROM fencegate_objects WHERE data IS NOT NULL").fetchall())
    finally:
        db.close()


async def test_a_store_made_without_auto_vacuum_is_migrated_at_start_and_keeps_every_byte(
    make_client: MakeClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "fencegate.db"
    kept = await old_store(path)
    count_before = pages(path)[0]
    caplog.set_level(logging.INFO, logger="gateway")
    client = await make_client()
    assert auto_vacuum_mode(str(path)) == 2
    assert "migrated to incremental auto_vacuum in" in caplog.text
    count, free = pages(path)
    assert free == 0
    assert count < count_before
    assert objects(path) == kept
    for key, data in kept.items():
        resp = await client.get(f"/v1/objects/{key}")
        assert resp.status == 200
        assert await resp.read() == data
    resp = await client.put("/v1/objects/new", data=b"n", headers={"Fencing-Token": "1"})
    assert resp.status == 201
    engine = open_storage(f"sqlite:///{path}")
    try:
        report = await verify_audit(engine)
    finally:
        await engine.dispose()
    assert report.ok, report.violations
    assert report.rows == 61  # 40 writes, 20 deletes, the new PUT


async def test_a_migration_short_of_space_changes_nothing_and_one_that_fits_is_done_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    kept = await old_store(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(NotEnoughSpace, match=r"needs \d+ bytes free in .*, which has 0; free space there"):
        await migrate_to_incremental(str(path), free=lambda _directory: 0)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert auto_vacuum_mode(str(path)) == 0
    done = await migrate_to_incremental(str(path))
    assert done is not None
    assert done.bytes_after < done.bytes_before
    assert await migrate_to_incremental(str(path)) is None  # done once
    assert objects(path) == kept


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
