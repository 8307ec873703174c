"""The fence in the user's own transaction: a fenced UPDATE against the same UPDATE unfenced, same run.

16 writers at once, one connection each, over 1,024 rows of a user table;
each transaction updates one row, picked at random (the same picks for
every case of a run), and commits durably. Three cases per database,
alternately, run by run:

- `unfenced`: the UPDATE alone, on a table without a trigger;
- `fence()`: `lockclient.sql.fence(conn, resource, token)`, then the same
  UPDATE, same table, same transaction;
- `trigger`: the same UPDATE on a table whose trigger
  (`lockclient.sql.install_statements`) checks the token column.

Every write carries the same token (equal tokens pass), so nothing is
refused and each case commits the same transactions: what differs is the
fence's one statement on the mark's row, the call's round trip or the
trigger's upsert. The goal is each fenced case >= 0.8x the
unfenced rate, per database, as same-run pairs. Beside each goal the bench
prints, from the same runs, the CPU each case spends per transaction (this
process, where SQLite runs too, plus PostgreSQL's processes): where the
cores are the limit, the rate ratio is at most the inverse ratio of those. PostgreSQL is the bench's
server (fsync on); SQLite a WAL file opened as the gateway's storage opens it
(`storage.engine.open_engine`: synchronous=FULL, BEGIN IMMEDIATE).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Iterator, Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from fencegate.bench.env import BenchEnv
from fencegate.bench.runner import Result, paired_ratio
from fencegate.bench.section import Goal, Section
from fencegate.bench.servers import cpu_seconds, cpu_used
from lockclient.sql import MARKS_TABLE, create_marks, fence, install_statements
from storage.engine import open_engine

WRITERS = 16
RESOURCES = 1024
GOAL = 0.8  # a fenced UPDATE >= 0.8x the same UPDATE unfenced
TOKEN = 1  # every write's token: equal tokens pass, so no case is refused
WARMUP = 4  # transactions per writer before a case's first timed run (connections, prepared statements)
UNFENCED, CALL, TRIGGER = "unfenced", "fence()", "trigger"
CASES = (UNFENCED, CALL, TRIGGER)
PLAIN_TABLE = "bench_sql_rows"
TRIGGER_TABLE = "bench_sql_rows_fenced"
TABLES = {UNFENCED: PLAIN_TABLE, CALL: PLAIN_TABLE, TRIGGER: TRIGGER_TABLE}
# The user's UPDATE, the same text in every case; the table names are this module's constants.
UPDATE = "UPDATE {table} SET value = value + 1, token = :token WHERE resource = :resource"
CREATE = "CREATE TABLE {table} (resource text PRIMARY KEY, value bigint NOT NULL, token bigint NOT NULL)"
TOKEN_COLUMN = "token"  # noqa: S105 - a column's name, not a secret
RESOURCE_NAMES = [f"bench-{index:04d}" for index in range(RESOURCES)]


def databases(env: BenchEnv) -> dict[str, str]:
    """Database name -> URL: the bench's PostgreSQL, and a fresh SQLite file."""
    return {"PostgreSQL": env.cluster.postgres_dsn, "SQLite": f"sqlite:///{env.workdir / 'sql-bench.db'}"}


async def prepare(engine: AsyncEngine) -> None:
    """Both user tables afresh with every row, the marks table (the bench's marks at TOKEN), and the
    trigger on one of them."""
    dialect = engine.dialect.name
    async with engine.begin() as conn:
        await conn.run_sync(create_marks)
        forget = text(f"DELETE FROM {MARKS_TABLE} WHERE resource = :resource")  # noqa: S608
        await conn.execute(forget, [{"resource": name} for name in RESOURCE_NAMES])
        for table in (PLAIN_TABLE, TRIGGER_TABLE):
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
            await conn.exec_driver_sql(CREATE.format(table=table))
        for statement in install_statements(
            dialect, table=TRIGGER_TABLE, token_column=TOKEN_COLUMN, resource_column="resource"
        ):
            await conn.exec_driver_sql(statement)
        for table in (PLAIN_TABLE, TRIGGER_TABLE):  # the trigger's inserts create every mark, at TOKEN
            insert = text(f"INSERT INTO {table} (resource, value, token) VALUES (:resource, 0, :token)")  # noqa: S608
            await conn.execute(insert, [{"resource": name, "token": TOKEN} for name in RESOURCE_NAMES])


async def write(engine: AsyncEngine, case: str, resource: str) -> None:
    """One of the user's transactions: the case's fence, the UPDATE, the commit."""
    async with engine.begin() as conn:
        if case == CALL:
            await fence(conn, resource, TOKEN)
        await conn.execute(text(UPDATE.format(table=TABLES[case])), {"resource": resource, "token": TOKEN})


async def measure(engine: AsyncEngine, case: str, picks: Sequence[str], result: Result | None) -> None:
    """`picks` written by WRITERS writers at once, each taking the next; rate and latencies to `result`."""
    queue: Iterator[str] = iter(picks)  # shared: a writer takes the next pick when its last commit is done

    async def writer() -> None:
        for resource in queue:
            started = time.perf_counter()
            await write(engine, case, resource)
            if result is not None:
                result.latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(WRITERS)))
    if result is not None:
        result.rates.append(len(picks) / (time.perf_counter() - started))


def _cpu_note(cpu: dict[str, list[float]], case: str, database: str) -> str:
    """What the same runs' CPU per transaction allows the case's ratio, where the cores are the limit."""
    unfenced, fenced = statistics.median(cpu[UNFENCED]), statistics.median(cpu[case])
    counted = "bench process + PostgreSQL" if database == "PostgreSQL" else "bench process, SQLite in it"
    return (
        f"CPU per transaction ({counted}): unfenced {unfenced * 1e6:.0f} µs, {case} "
        f"{fenced * 1e6:.0f} µs, so where CPU-bound the ratio is at most {unfenced / fenced:.2f}x here"
    )


async def sql(env: BenchEnv) -> Section:
    results: list[Result] = []
    goals: list[Goal] = []
    extra: dict[str, float] = {}
    ops = max(env.ops, WRITERS)
    for database, url in databases(env).items():
        engine = open_engine(url)
        server = env.cluster.postgres_pids() if database == "PostgreSQL" else []
        try:
            await prepare(engine)
            cases = {case: Result(database, case) for case in CASES}
            cpu: dict[str, list[float]] = {case: [] for case in CASES}  # seconds per transaction, per run
            for case in CASES:
                await measure(engine, case, RESOURCE_NAMES[: WRITERS * WARMUP], None)
            for run in range(env.runs):
                rng = random.Random(run)
                picks = [rng.choice(RESOURCE_NAMES) for _ in range(ops)]
                for case in CASES:
                    env.progress(f"sql: {database} {case} run {run + 1}/{env.runs}")
                    before, own = cpu_seconds(server), time.process_time()
                    await measure(engine, case, picks, cases[case])
                    used = time.process_time() - own + cpu_used(before, cpu_seconds(server))
                    cpu[case].append(used / len(picks))
        finally:
            await engine.dispose()
        results += cases.values()
        extra |= {f"{database}: CPU µs per transaction, {c}": statistics.median(cpu[c]) * 1e6 for c in CASES}
        goals += [
            Goal(
                f"{database}: {case} / unfenced",
                paired_ratio(cases[case], cases[UNFENCED]),
                ">=",
                GOAL,
                _cpu_note(cpu, case, database),
            )
            for case in (CALL, TRIGGER)
        ]
    title = (
        f"a fenced UPDATE in the user's transaction vs the same UPDATE, {WRITERS} writers, {RESOURCES} rows"
    )
    return Section("sql", title, results, goals, extra)
