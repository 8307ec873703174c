"""The sql bench measures what it names: each fenced case refuses a stale token, the unfenced one does not.

On the suite's PostgreSQL and a SQLite file, as the bench runs them. Speed
is never asserted: the smoke run only has to produce every case's numbers
and both goals per database.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from fencegate.bench import sql
from fencegate.bench.env import BenchEnv
from fencegate.lab.cluster import LocalCluster
from lockclient.errors import StaleToken
from lockclient.sql import STALE_SQLSTATE, fence
from storage.engine import open_engine

STALE = sql.RESOURCE_NAMES[0]


@pytest.mark.parametrize("database", ["PostgreSQL", "SQLite"])
async def test_each_fenced_case_refuses_a_stale_token_and_the_unfenced_one_writes(
    database: str, postgres_cluster: LocalCluster, tmp_path: Path
) -> None:
    env = BenchEnv(postgres_cluster, tmp_path, runs=1, ops=16, seconds=0.1, quiet=True)
    engine = open_engine(sql.databases(env)[database])
    try:
        await sql.prepare(engine)
        async with engine.begin() as conn:  # a newer lease has spoken: the bench's token is now stale
            await fence(conn, STALE, sql.TOKEN + 1)
        with pytest.raises(StaleToken):
            await sql.write(engine, sql.CALL, STALE)
        with pytest.raises(DBAPIError) as refused:
            await sql.write(engine, sql.TRIGGER, STALE)
        if database == "PostgreSQL":
            assert getattr(refused.value.orig, "sqlstate", None) == STALE_SQLSTATE
        else:
            assert "fencegate_stale_token" in str(refused.value.orig)
        await sql.write(engine, sql.UNFENCED, STALE)
        async with engine.connect() as conn:
            values = {}
            for table in (sql.PLAIN_TABLE, sql.TRIGGER_TABLE):
                query = text(f"SELECT value FROM {table} WHERE resource = :resource")  # noqa: S608
                values[table] = (await conn.execute(query, {"resource": STALE})).scalar()
        assert values == {sql.PLAIN_TABLE: 1, sql.TRIGGER_TABLE: 0}  # only the unfenced write landed
    finally:
        await engine.dispose()


async def test_the_smoke_run_measures_every_case_and_both_goals_per_database(
    postgres_cluster: LocalCluster, tmp_path: Path
) -> None:
    env = BenchEnv(postgres_cluster, tmp_path, runs=1, ops=16, seconds=0.1, quiet=True)
    section = await sql.sql(env)
    assert [(r.group, r.name) for r in section.results] == [
        (database, case) for database in ("PostgreSQL", "SQLite") for case in sql.CASES
    ]
    assert all(r.rates and all(rate > 0 for rate in r.rates) for r in section.results)
    assert [g.name for g in section.goals] == [
        "PostgreSQL: fence() / unfenced",
        "PostgreSQL: trigger / unfenced",
        "SQLite: fence() / unfenced",
        "SQLite: trigger / unfenced",
    ]
    assert all(math.isfinite(g.value) and (g.op, g.bound) == (">=", sql.GOAL) for g in section.goals)
    assert all("CPU per transaction" in g.note for g in section.goals)  # what this machine allows
    assert len(section.extra) == 2 * len(sql.CASES)
    assert all(value > 0 and math.isfinite(value) for value in section.extra.values())
