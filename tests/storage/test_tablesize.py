"""Each table's rows and bytes, as the gateway's metrics report them, on real SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from gateway.storage_tls import open_storage
from storage import SqlObjectStore, migrate
from storage.tablesize import TABLES, table_sizes
from tests.databases import ENGINES, engine_url


@pytest.fixture(params=ENGINES)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with engine_url(request, tmp_path, "sizes") as found:
        yield found


async def test_every_table_has_its_rows_and_bytes(url: str) -> None:
    engine = open_storage(url)
    try:
        await migrate(engine)
        store = SqlObjectStore(engine)
        for n in range(30):
            await store.put(f"k/{n}", b"x" * 100, resource=f"r/{n % 3}", token=n + 1)
        if engine.dialect.name == "postgresql":  # reltuples is what the last analyze counted
            conn = await asyncpg.connect(url)
            try:
                await conn.execute("ANALYZE")
            finally:
                await conn.close()
        sizes = {size.table: size for size in await table_sizes(engine)}
    finally:
        await engine.dispose()
    assert set(sizes) == set(TABLES)
    rows = {table: size.rows for table, size in sizes.items()}
    assert rows == {
        "fencegate_objects": 30,
        "fencegate_bindings": 30,
        "fencegate_fences": 3,
        "fencegate_audit": 30,
        "fencegate_audit_head": 1,
        "fencegate_idempotency": 0,
    }
    assert all(size.bytes is not None and size.bytes > 0 for size in sizes.values()), sizes
