"""Eight processes write one user table at once, stale and fresh tokens mixed, on real PostgreSQL (each
isolation level) and SQLite, through `fence()` and through the trigger. What the database finally holds
is read back: per resource, the tokens of committed rows never go back (each commit records its token
and its place in the resource's order, `seq`, in the same transaction), a refused transaction left
nothing, and the marks are the highest committed tokens. The same check on a naive read-check-write
finds the violation, so it can fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from fencegate.lab.cluster import LocalCluster
from lockclient.sql import create_marks, install_statements
from lockclient.tokens.postgres import asyncpg_url
from tests.databases import fresh_database
from tests.sql._writer import RESOURCES

ROOT = Path(__file__).resolve().parents[2]
WRITERS = 8
ROUNDS = 20
TABLES = [
    "CREATE TABLE counters (resource TEXT PRIMARY KEY, seq INTEGER NOT NULL, token BIGINT NOT NULL)",
    "CREATE TABLE history "
    "(attempt TEXT PRIMARY KEY, resource TEXT NOT NULL, token BIGINT NOT NULL, seq INTEGER)",
]


@contextlib.asynccontextmanager
async def database(kind: str, cluster: LocalCluster, tmp_path: Path) -> AsyncIterator[str]:
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'own.db'}"
        return
    async with fresh_database(cluster, prefix="race") as url:
        yield asyncpg_url(url)


async def prepare(url: str, mode: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for statement in TABLES:
                await conn.execute(text(statement))
            if mode == "trigger":
                for statement in install_statements(
                    engine.dialect.name, table="counters", token_column="token", resource_column="resource"
                ):
                    await conn.exec_driver_sql(statement)
            else:
                await conn.run_sync(create_marks)
            for resource in RESOURCES:
                await conn.execute(text("INSERT INTO counters VALUES (:r, 0, 1)"), {"r": resource})
    finally:
        await engine.dispose()


async def race(url: str, mode: str, isolation: str, tmp_path: Path) -> list[dict[str, Any]]:
    """Run the writers at once; every attempt's outcome as they recorded it."""
    outs = [tmp_path / f"writer-{n}.jsonl" for n in range(WRITERS)]
    tokens = tmp_path / "tokens.db"
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-W", "error", "-m", "tests.sql._writer",
            str(out), url, mode, isolation, str(tokens), str(n), str(ROUNDS),
            cwd=ROOT, stderr=asyncio.subprocess.PIPE,
        )
        for n, out in enumerate(outs)
    ]  # fmt: skip
    async with asyncio.timeout(120):
        errors = [(await proc.communicate())[1] for proc in procs]
    for proc, err in zip(procs, errors, strict=True):
        assert proc.returncode == 0, err.decode()
    return [json.loads(line) for out in outs for line in out.read_text().splitlines()]


async def held(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """What the database finally holds: the history in each resource's commit order, counters, marks."""
    queries = {
        "history": "SELECT resource, seq, token, attempt FROM history ORDER BY resource, seq",
        "counters": "SELECT resource, seq, token FROM counters ORDER BY resource",
        "marks": "SELECT resource, token FROM fencegate_marks ORDER BY resource",
    }
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return {name: [tuple(r) for r in await conn.execute(text(sql))] for name, sql in queries.items()}
    finally:
        await engine.dispose()


def violations(history: list[tuple[Any, ...]]) -> list[str]:
    """Each commit whose token is below the one committed before it on its resource."""
    found = []
    last: dict[str, int] = {}
    for resource, seq, token, attempt in history:
        if token < last.get(resource, 0):
            found.append(f"{resource} #{seq}: token {token} ({attempt}) after {last[resource]}")
        last[resource] = max(last.get(resource, 0), token)
    return found


def check(outcomes: list[dict[str, Any]], tables: dict[str, list[tuple[Any, ...]]]) -> None:
    """Everything but the order: each outcome is what the database holds."""
    history = tables["history"]
    committed = {o["attempt"] for o in outcomes if o["outcome"] == "committed"}
    assert {row[3] for row in history} == committed, "a refused attempt left a row, or a commit is missing"
    assert all(row[1] is not None for row in history)
    for resource, seq, token in tables["counters"]:
        mine = [row for row in history if row[0] == resource]
        assert sorted(row[1] for row in mine) == list(range(1, seq + 1))
        assert token == (mine[-1][2] if mine else 1)
    refused = [o for o in outcomes if o["outcome"] == "refused"]
    assert committed, "nothing committed: the race means nothing"
    assert refused, "nothing refused: no stale token met a newer one"


FENCED = [
    ("postgresql", "call", "READ COMMITTED"),
    ("postgresql", "call", "REPEATABLE READ"),
    ("postgresql", "call", "SERIALIZABLE"),
    ("postgresql", "trigger", "READ COMMITTED"),
    ("postgresql", "trigger", "REPEATABLE READ"),
    ("postgresql", "trigger", "SERIALIZABLE"),
    ("sqlite", "call", "-"),
    ("sqlite", "trigger", "-"),
]


@pytest.mark.parametrize(("kind", "mode", "isolation"), FENCED, ids=lambda v: str(v).replace(" ", "-"))
async def test_committed_tokens_never_go_back_and_refusals_leave_nothing(
    postgres_cluster: LocalCluster, tmp_path: Path, kind: str, mode: str, isolation: str
) -> None:
    async with database(kind, postgres_cluster, tmp_path) as url:
        await prepare(url, mode)
        outcomes = await race(url, mode, isolation, tmp_path)
        tables = await held(url)
    assert violations(tables["history"]) == []
    check(outcomes, tables)
    highest: dict[str, int] = {}
    for resource, _, token, _ in tables["history"]:
        highest[resource] = max(highest.get(resource, 1), token)
    assert dict(tables["marks"]) == highest  # the mark is the highest token committed, never past it
    if isolation in ("REPEATABLE READ", "SERIALIZABLE"):
        assert sum(o["retries"] for o in outcomes) > 0, "no serialization failure: the writers never met"


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
async def test_the_same_check_finds_the_race_of_a_naive_read_check_write(
    postgres_cluster: LocalCluster, tmp_path: Path, kind: str
) -> None:
    """Read the row's token, compare, pause, write (PostgreSQL's READ COMMITTED, the default; SQLite's
    driver begins the transaction at the first write, after the read): a stale token commits after a
    newer one."""
    async with database(kind, postgres_cluster, tmp_path) as url:
        await prepare(url, "naive")
        outcomes = await race(url, "naive", "-", tmp_path)
        tables = await held(url)
    check(outcomes, tables)
    assert violations(tables["history"]) != []
