"""Fenced PUTs per second on a store that already holds millions of keys, against a fresh store.

On each engine, three cases, each a `fencegate serve` driven by wrk with
fenced PUTs to new keys, alternating in every run (odd runs backwards): a
fresh store; a store filled with SQL (`fill.py`) to `KEYS_PER_OP x ops`
keys (10 million in the full bench: objects of 64 bytes, their bindings and
marks, and as many audit entries); and the same filled store while the
gateway expires `EXPIRED_SHARE` as many idempotency records (1 million in
the full bench), written long ago just before each run, with
`--idempotency-ttl 1s` so its sweep runs through the whole measurement; and
the same store while the gateway archives `ARCHIVED_SHARE` as many old audit
entries (100,000 in the full bench; `--audit-retention 1s`: written to a
file, read back, deleted), added truly chained before each run.
Goals: filled / fresh >= 0.9, expiring / filled >= 0.9 and archiving /
filled >= 0.9 in rate, and the p99 of fenced PUTs while expiring within
1.5x of the filled store's without.
The fill time and each table's bytes per row on the filled store are
reported (docs/operations.md, sizing), and how many archive files each
archiving run completed (0: the run measured the paced read and write of
the file only, not its deletes).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
from sqlalchemy import text

from fencegate.bench.env import BenchEnv
from fencegate.bench.fill import fill, fill_archivable, fill_expired
from fencegate.bench.runner import Result, paired_ratio
from fencegate.bench.section import Goal, Section
from fencegate.bench.servers import http_server
from fencegate.bench.wrk import run_wrk
from gateway.storage_tls import open_storage
from storage import migrate
from storage.tablesize import table_sizes

CONNECTIONS = 32
KEYS_PER_OP = 10_000  # the full bench's 1,000 ops: 10 million keys; the smoke test's 10: 100,000
EXPIRED_SHARE = 10  # one expired idempotency record per this many keys: 1 million in the full bench
ARCHIVED_SHARE = 100  # one old audit entry archived per this many keys and run: 100,000 in the full bench
ENGINES = ("SQLite", "PostgreSQL")
KINDS = ("fresh store", "filled store", "filled store, expiring", "filled store, archiving")


@contextlib.asynccontextmanager
async def _database(env: BenchEnv, engine: str, workdir: Path, name: str) -> AsyncIterator[str]:
    """A store's URL: a SQLite file in `workdir`, or a database of its own on the bench's PostgreSQL."""
    if engine == "SQLite":
        yield f"sqlite:///{workdir / f'{name}.db'}"
        return
    dsn = env.cluster.postgres_dsn
    database = f"growth_{name}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f"CREATE DATABASE {database}")
        try:
            yield dsn.rsplit("/", 1)[0] + f"/{database}"
        finally:
            await admin.execute(f"DROP DATABASE {database} WITH (FORCE)")
    finally:
        await admin.close()


async def _prepare(
    url: str, keys: int, expired: int = 0, run: int = 0, archived: int = 0, runs: int = 0
) -> dict[str, float]:
    """Migrate (and fill, its audit ids after `runs` x `archived` left free) the store, or add a run's
    expired records or archivable entries; the seconds the fill took and bytes per row of each table."""
    engine = open_storage(url, command_timeout=3600)
    try:
        await migrate(engine)
        started = time.monotonic()
        if keys:
            await fill(engine, keys, reserve=runs * archived)
        figures = {"fill seconds": time.monotonic() - started}
        if expired:
            await fill_expired(engine, expired, prefix=f"old{run}")
        if archived and not keys:
            # just below the entries left: the fill's, or the block the last run's archive took
            await fill_archivable(engine, (runs - run - 1) * archived + 1, archived)
        if keys:
            if engine.dialect.name == "postgresql":  # its row counts are what the last analyze saw
                async with engine.begin() as conn:
                    await conn.execute(text("ANALYZE"))
            for size in await table_sizes(engine):
                if size.rows > 1 and size.bytes and size.table != "fencegate_idempotency":
                    figures[f"bytes per row, {size.table}"] = size.bytes / size.rows
        return figures
    finally:
        await engine.dispose()


async def growth(env: BenchEnv) -> Section:
    keys = env.ops * KEYS_PER_OP
    expired = keys // EXPIRED_SHARE
    archived = max(1, keys // ARCHIVED_SHARE)
    results = {f"{e}: {k}": Result("growth", f"{e}: {k}") for e in ENGINES for k in KINDS}
    extra: dict[str, float] = {}
    for engine in ENGINES:
        workdir = env.workdir / f"growth-{engine}"
        workdir.mkdir(parents=True, exist_ok=True)
        async with (
            _database(env, engine, workdir, "fresh") as fresh,
            _database(env, engine, workdir, "filled") as filled,
        ):
            env.progress(f"growth: {engine}: filling a store with {keys} keys")
            await _prepare(fresh, 0)
            figures = await _prepare(filled, keys, archived=archived, runs=env.runs)
            extra |= {f"{engine}: {name} ({keys} keys)": value for name, value in figures.items()}
            for run in range(env.runs):
                kinds = KINDS if run % 2 == 0 else tuple(reversed(KINDS))
                for kind in kinds:
                    env.progress(f"growth: {engine}: {kind} run {run + 1}/{env.runs}")
                    url = fresh if kind == "fresh store" else filled
                    flags = ["--storage", url]
                    here = workdir / f"{run}-{kind.replace(' ', '_').replace(',', '')}"
                    here.mkdir()
                    if kind.endswith("expiring"):
                        await _prepare(url, 0, expired, run)
                        flags += ["--idempotency-ttl", "1s"]
                    if kind.endswith("archiving"):
                        await _prepare(url, 0, run=run, archived=archived, runs=env.runs)
                        (here / "archives").mkdir()
                        flags += ["--audit-retention", "1s", "--audit-archive-dir", str(here / "archives")]
                    argv = [
                        "fencegate.cli",
                        "--log-level",
                        "WARNING",
                        "serve",
                        "--data-dir",
                        str(here),
                        *flags,
                    ]
                    with http_server(argv, here / "gateway.log") as (address, _pid):
                        out = await asyncio.to_thread(
                            run_wrk, address, seconds=env.seconds, connections=CONNECTIONS, workdir=here,
                            prefix=f"g{run}-{uuid.uuid4().hex[:6]}-",
                        )  # fmt: skip
                    if out.non_2xx:
                        raise RuntimeError(f"growth: {engine}: {kind}: {out.non_2xx} PUTs answered non-2xx")
                    if kind.endswith("archiving"):  # whether the run measured a whole archive, deletes too
                        done = len(list((here / "archives").glob("audit-*.jsonl.gz")))
                        extra[f"{engine}: archives written during run {run + 1}"] = done
                    result = results[f"{engine}: {kind}"]
                    result.rates.append(out.requests_per_s)
                    result.latencies.append(out.p99_ms / 1000)

    def paired(engine: str, numerator: str, denominator: str) -> float:
        return paired_ratio(results[f"{engine}: {numerator}"], results[f"{engine}: {denominator}"])

    def p99_ratio(engine: str) -> float:
        during = max(results[f"{engine}: filled store, expiring"].latencies)
        without = max(results[f"{engine}: filled store"].latencies)
        return during / without if without else float("nan")

    goals = []
    for engine in ENGINES:
        filled_fresh = paired(engine, "filled store", "fresh store")
        expiring = paired(engine, "filled store, expiring", "filled store")
        archiving = paired(engine, "filled store, archiving", "filled store")
        goals += [
            Goal(f"{engine}: filled store ({keys} keys) / fresh store", filled_fresh, ">=", 0.9),
            Goal(f"{engine}: expiring {expired} records / not expiring, filled store", expiring, ">=", 0.9),
            Goal(
                f"{engine}: p99 while expiring / p99 without (worst run each)", p99_ratio(engine), "<=", 1.5
            ),
            Goal(f"{engine}: archiving {archived} audit entries / not, filled store", archiving, ">=", 0.9),
        ]
    return Section(
        "growth",
        f"fenced PUT req/s, wrk -c{CONNECTIONS}, on a fresh store and on one filled with SQL to {keys} keys "
        "(p50/p99 over runs' p99)",
        list(results.values()),
        goals,
        extra,
    )
