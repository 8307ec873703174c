"""A gateway upgraded in place keeps working on a database written by the previous release.

The fixtures in `tests/storage/data/` were written by fencegate 0.1.0's own
code (schema version 2), which stored, through its fenced store: two objects
under the lock's resource `invoices` (one with an Idempotency-Key), one under
the key itself (`notes/7`), and one written then deleted under `gone`.
`v2.db` is that SQLite file; `v2-postgresql.sql` is `pg_dump --inserts` of
the same on PostgreSQL. Upgrading binds every key to the resource it was
written under (the deleted one through the audit trail), keeps every row,
chains the audit entries it finds (schema version 4), and from then on the
fence refuses a request naming another resource. An old trail edited by hand
to hold what fencegate never writes is not chained: the gateway refuses to
start, says which entry and what to do, and leaves the store as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import select

from fencegate.lab.cluster import LocalCluster
from gateway import Settings, create_app
from storage import (
    SCHEMA_VERSION,
    BoundElsewhere,
    SchemaError,
    SqlObjectStore,
    migrate,
    open_engine,
    verify_audit,
)
from storage.models import Binding, SchemaVersion
from storage.protocols import Caller
from tests.databases import fresh_database

DATA = Path(__file__).with_name("data")
LONG_TRAIL = 100_000  # entries of an old trail: stamping them in one statement takes seconds
SHORT_TIMEOUT = 0.25  # seconds one request's database command may take; the migration takes longer


@pytest.fixture(params=["sqlite", "postgresql"])
async def old_database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        shutil.copy(DATA / "v2.db", tmp_path / "store.db")
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
    async with fresh_database(cluster, "upgrade") as url:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute((DATA / "v2-postgresql.sql").read_text())
        finally:
            await conn.close()
        yield url


async def test_audit_verify_of_a_store_not_yet_migrated_says_how_and_changes_nothing(
    old_database: str,
) -> None:
    engine = open_engine(old_database)
    try:
        with pytest.raises(SchemaError, match="start a gateway of this version on it once"):
            await verify_audit(engine)
        with pytest.raises(SchemaError, match="start a gateway"):  # still the old store: nothing migrated
            await verify_audit(engine)
    finally:
        await engine.dispose()


async def test_an_upgraded_database_binds_every_key_it_knows_and_keeps_its_data(old_database: str) -> None:
    engine = open_engine(old_database)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(select(SchemaVersion.version))).scalar_one() == 2
        assert await migrate(engine) == SCHEMA_VERSION
        chained = await verify_audit(engine)  # the entries before the upgrade are chained by it
        assert chained.ok, chained.violations
        assert chained.rows > 0
        async with engine.connect() as conn:
            bindings = dict((await conn.execute(select(Binding.key, Binding.resource))).all())
        assert bindings == {
            "invoices/1": "invoices",
            "invoices/2": "invoices",
            "notes/7": "notes/7",
            "gone/1": "gone",  # deleted before the upgrade: bound through the audit trail
        }
        store = SqlObjectStore(engine)
        old = await store.get("invoices/1", resource="invoices", token=None)
        assert (old.data, old.meta.token, old.meta.version, old.content_type) == (
            b"one",
            5,
            1,
            "application/octet-stream",
        )
        for key, named in (("invoices/1", "invoices/1"), ("notes/7", "invoices"), ("gone/1", "other")):
            with pytest.raises(BoundElsewhere):
                await store.put(key, b"stale", resource=named, token=10**6)
        assert (await store.mark("invoices/1"), await store.mark("other")) == (0, 0)
        # The old idempotency record still answers its retry.
        retry = await store.put(
            "invoices/2", b"two", resource="invoices", token=6, caller=Caller("key:billing", "k-1", "d" * 64)
        )
        assert (retry.version, retry.created) == (1, True)
        newer = await store.put("invoices/1", b"one, again", resource="invoices", token=7)
        assert newer.version == 2
        after = await verify_audit(engine)  # new entries go on from the chain the upgrade made
        assert after.ok, after.violations
        assert after.rows == chained.rows + 2
    finally:
        await engine.dispose()


async def test_a_gateway_migrates_a_long_old_trail_with_a_short_storage_timeout(
    postgres_cluster: LocalCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    """Chaining an old trail takes longer than `--storage-timeout`, which bounds a request, not a
    migration: cut by it, the migration would fail every start of every gateway on the store."""
    async with fresh_database(postgres_cluster, "longtrail") as url:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute((DATA / "v2-postgresql.sql").read_text())
            at = datetime.now(UTC)
            entries = [
                (at, "c", "PUT", f"long/{n}", "long", n, n, 201, "accepted") for n in range(LONG_TRAIL)
            ]
            columns = ["at", "client", "method", "key", "resource", "token", "mark", "status", "outcome"]
            await conn.copy_records_to_table(
                "fencegate_audit", records=entries, columns=columns, schema_name="public"
            )
            fence = [("long", LONG_TRAIL, at)]
            await conn.copy_records_to_table("fencegate_fences", records=fence, schema_name="public")
        finally:
            await conn.close()
        settings = Settings(data_dir=tmp_path, storage=url, storage_timeout=SHORT_TIMEOUT)
        client = await aiohttp_client(create_app(settings))
        answer = await client.put(
            "/v1/objects/long/new", data=b"x", headers={"Fencing-Token": str(LONG_TRAIL)}
        )
        assert answer.status == 201, await answer.text()
        await client.close()
        engine = open_engine(url)
        try:
            report = await verify_audit(engine)
        finally:
            await engine.dispose()
    assert report.ok, report.violations
    assert report.rows > LONG_TRAIL


# An old trail edited by hand: (engine, SQL, what the refusal says of the entry, the entry). Step 4
# chained the first kind silently (vouching for a token that is text) and the last leaves out of the chain;
# the others made a start fail with a traceback, or as if the database were unreachable.
EDITED_OLD_TRAILS = {
    "text-in-an-integer-column": (
        "sqlite",
        "UPDATE fencegate_audit SET token = 'abc' WHERE id = 3",
        "token holds 'abc', not an integer",
        3,
    ),
    "text-that-is-no-time": (
        "sqlite",
        "UPDATE fencegate_audit SET at = 'yesterday' WHERE id = 2",
        "at holds 'yesterday', not a time",
        2,
    ),
    "text-that-is-not-utf-8": (
        "sqlite",
        "UPDATE fencegate_audit SET client = CAST(x'ff' AS TEXT) WHERE id = 4",
        "client holds b'\\xff', text that is not UTF-8",
        4,
    ),
    "a-time-beyond-python": (
        "postgresql",
        "UPDATE fencegate_audit SET at = '20000-01-01' WHERE id = 2",
        "at holds '20000-01-01 00:00:00+00', beyond the times fencegate writes",
        2,
    ),
    "an-id-below-1": ("postgresql", "UPDATE fencegate_audit SET id = 0 WHERE id = 1", "id 0 is below 1", 0),
    "an-id-below-1-on-sqlite": (
        "sqlite",
        "UPDATE fencegate_audit SET id = -5 WHERE id = 1",
        "id -5 is below 1",
        -5,
    ),
}
_MAIN = "import sys; from fencegate.cli import main; sys.exit(main(sys.argv[1:]))"
START_TIMEOUT = 30.0  # seconds: a refused start returns at once; one that serves runs until killed


@pytest.mark.parametrize("kind", list(EDITED_OLD_TRAILS))
async def test_a_gateway_refuses_to_chain_an_edited_old_trail_and_changes_nothing(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    engine_name, sql, says, entry = EDITED_OLD_TRAILS[kind]
    async with contextlib.AsyncExitStack() as stack:
        if engine_name == "sqlite":
            shutil.copy(DATA / "v2.db", tmp_path / "store.db")
            url = f"sqlite:///{tmp_path / 'store.db'}"
            with contextlib.closing(sqlite3.connect(tmp_path / "store.db")) as db, db:
                db.execute(sql)
        else:
            cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
            url = await stack.enter_async_context(fresh_database(cluster, "edited"))
            for statements in ((DATA / "v2-postgresql.sql").read_text(), sql):  # the dump empties search_path
                conn = await asyncpg.connect(url)
                try:
                    await conn.execute(statements)
                finally:
                    await conn.close()
        before = await _old_state(url)
        run = [sys.executable, "-c", _MAIN, "serve", "--storage", url, "--port", "0"]
        run += ["--data-dir", str(tmp_path / "data")]
        started = await asyncio.to_thread(
            subprocess.run, run, capture_output=True, text=True, timeout=START_TIMEOUT, check=False
        )
        assert "Traceback" not in started.stderr, started.stderr
        assert started.returncode == 3, started.stderr
        refusal = f"entry {entry} of the audit trail (fencegate_audit) is malformed: {says}"
        said = [line for line in started.stderr.splitlines() if refusal in line]
        assert len(said) == 2, started.stderr  # the log line, and the command's last word
        assert (
            said[0].split(" ERROR gateway: storage ")[1].endswith(said[1].removeprefix("fencegate serve: "))
        )
        assert "correct or remove that entry with SQL, or restore the store from a backup" in said[1]
        assert await _old_state(url) == before
        assert before[0] == 2  # still the old store: no step of the migration was kept


async def _old_state(url: str) -> tuple[int, list[str], list[tuple[str, ...]]]:
    """The schema version, the audit table's columns and its rows as text, straight from the database."""
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.text_factory = bytes  # an edit may have left text that is not UTF-8
            version = db.execute("SELECT version FROM fencegate_schema").fetchone()[0]
            columns = [row[1].decode() for row in db.execute("PRAGMA table_info(fencegate_audit)")]
            rows = db.execute("SELECT * FROM fencegate_audit ORDER BY id").fetchall()
            tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master ORDER BY name")]
        return int(version), columns + [t.decode() for t in tables], [tuple(map(repr, row)) for row in rows]
    conn = await asyncpg.connect(url)
    try:
        version = await conn.fetchval("SELECT version FROM fencegate_schema")
        columns = await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'fencegate_audit' "
            "ORDER BY ordinal_position"
        )
        tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
        rows = await conn.fetch("SELECT fencegate_audit::text FROM fencegate_audit ORDER BY id")
    finally:
        await conn.close()
    names = [row[0] for row in columns] + [row[0] for row in tables]
    return int(version), names, [(row[0],) for row in rows]
