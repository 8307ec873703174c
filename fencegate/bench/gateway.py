"""Fenced durable PUTs per second through `fencegate serve`, driven by wrk.

Cases: an in-memory aiohttp server (the HTTP ceiling); naive durable
servers (the fence and the write in one transaction per request) on SQLite
(aiosqlite) and on PostgreSQL (an asyncpg pool), the group-commit goals'
yardsticks, and a stricter SQLite one with less work (no fence, one thread
hop per request); fencegate on SQLite and on PostgreSQL, each with group
commit and without (`--group-commit 0`), on PostgreSQL also as two
replicas (each driven by its own wrk with half the connections: a load
balancer would add its own CPU on this machine; one commit lane each, as
docs/operations.md advises for several replicas); and the same gateway with
the fence taken out (`bench.fenceoff`) on each engine. Odd runs go through
the cases backwards. Goals, each the median of the runs' own ratios:
fenced group commit >= 3x the naive server of its engine; PostgreSQL >=
0.5x SQLite; fence on >= 0.9x fence off on each engine; two replicas >=
1.0x one. The gateway's resident memory after load is reported, and (the
`reads` lines) how plain GETs of 64 of the keys just written compare with
the PUTs on the same gateway, group commit on each engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import Iterator
from pathlib import Path

from fencegate.bench.env import BenchEnv
from fencegate.bench.runner import Result, paired_ratio
from fencegate.bench.section import Goal, Section
from fencegate.bench.servers import cpu_seconds, cpu_used, http_server, rss_mib
from fencegate.bench.wrk import run_wrk

CONNECTIONS = 32


@contextlib.contextmanager
def _servers(case: str, env: BenchEnv, workdir: Path) -> Iterator[list[tuple[str, int]]]:
    log = workdir / f"{case.replace(' ', '_')}.log"
    serve = ["fencegate.cli", "--log-level", "WARNING", "serve", "--data-dir", str(workdir / "gw")]
    unfenced = ["fencegate.bench.fenceoff", *serve[1:]]
    pg = ["--storage", env.cluster.postgres_dsn]
    with contextlib.ExitStack() as stack:
        if case == "in-memory aiohttp":
            specs = [["fencegate.bench.baseline", "memory"]]
        elif case == NAIVE:
            specs = [["fencegate.bench.baseline", "naive", "--db", str(workdir / "naive.db")]]
        elif case == NAIVE_PG:
            dsn = env.cluster.postgres_dsn.replace("postgresql+asyncpg://", "postgresql://", 1)
            specs = [["fencegate.bench.baseline", "naive-postgresql", "--dsn", dsn]]
        elif case == UNFENCED:
            specs = [["fencegate.bench.baseline", "unfenced", "--db", str(workdir / "naive.db")]]
        elif case == "fencegate SQLite, group commit":
            specs = [serve]
        elif case == "fencegate SQLite, fence off":
            specs = [unfenced]
        elif case == "fencegate SQLite, --group-commit 0":
            specs = [[*serve, "--group-commit", "0"]]
        elif case == PG:
            specs = [[*serve, *pg]]
        elif case == "fencegate PostgreSQL, --group-commit 0":
            specs = [[*serve, *pg, "--group-commit", "0"]]
        elif case == "fencegate PostgreSQL, fence off":
            specs = [[*unfenced, *pg]]
        else:  # two replicas on one PostgreSQL
            lanes = ["--commit-lanes", "1"]
            specs = [[*serve, *pg, *lanes], [*serve[:-1], str(workdir / "gw2"), *pg, *lanes]]
        yield [stack.enter_context(http_server(argv, log)) for argv in specs]


NAIVE = "naive SQLite: fence+write, aiosqlite"
NAIVE_PG = "naive PostgreSQL: fence+write, asyncpg"
UNFENCED = "naive SQLite: no fence, one thread hop"
SQLITE = "fencegate SQLite, group commit"
PG = "fencegate PostgreSQL, group commit"
READ_CASES = (SQLITE, PG)  # after their PUTs, plain GETs on the same gateway (the `reads` lines)
READ_SECONDS = 2.0  # per GET run: 2 cases x 5 runs add 20 s to the full bench
CASES = (
    "in-memory aiohttp",
    NAIVE,
    UNFENCED,
    SQLITE,
    "fencegate SQLite, fence off",
    "fencegate SQLite, --group-commit 0",
    NAIVE_PG,
    PG,
    "fencegate PostgreSQL, fence off",
    "fencegate PostgreSQL, --group-commit 0",
    "fencegate PostgreSQL, 2 replicas",
)


async def gateway(env: BenchEnv) -> Section:
    results = {case: Result("gateway", case) for case in CASES}
    memory: dict[str, float] = {}
    socket_errors: dict[str, int] = {}
    reads: dict[str, list[float]] = {}  # per case: plain GET req/s / fenced PUT req/s, per run
    # CPU ms per 1,000 requests of the gateway processes and of PostgreSQL, per PostgreSQL case and run
    cpu: dict[str, list[tuple[float, float]]] = {}
    for run in range(env.runs):
        # odd runs go backwards, so neither twin of a pair always runs first
        for index, case in enumerate(CASES) if run % 2 == 0 else reversed(list(enumerate(CASES))):
            env.progress(f"gateway: {case} run {run + 1}/{env.runs}")
            workdir = env.workdir / f"gateway-{run}-{index}"
            workdir.mkdir(parents=True, exist_ok=True)
            with _servers(case, env, workdir) as servers:
                gateways = [pid for _, pid in servers]
                before = cpu_seconds(gateways), cpu_seconds(env.cluster.postgres_pids())
                outs = await asyncio.gather(*(
                    asyncio.to_thread(run_wrk, url, seconds=env.seconds,
                                      connections=CONNECTIONS // len(servers), workdir=workdir,
                                      prefix=f"{workdir.name}-{i}-")
                    for i, (url, _) in enumerate(servers)
                ))  # fmt: skip
                after = cpu_seconds(gateways), cpu_seconds(env.cluster.postgres_pids())
                memory[case] = max(rss_mib(pid) for _, pid in servers)
                if case in READ_CASES:  # plain GETs of the keys just written, on the same gateway
                    ((url, _),) = servers
                    got = await asyncio.to_thread(run_wrk, url, seconds=min(env.seconds, READ_SECONDS),
                                                  connections=CONNECTIONS, workdir=workdir,
                                                  prefix=f"{workdir.name}-0-", reads=True)  # fmt: skip
                    if got.non_2xx:
                        raise RuntimeError(f"{case}: {got.non_2xx} plain GETs answered non-2xx")
                    reads.setdefault(case, []).append(got.requests_per_s / outs[0].requests_per_s)
            if "PostgreSQL" in case:
                per_1000 = 1e6 / max(1, sum(o.requests for o in outs))  # seconds -> ms per 1,000 requests
                cpu.setdefault(case, []).append(
                    (cpu_used(before[0], after[0]) * per_1000, cpu_used(before[1], after[1]) * per_1000)
                )
            refused = sum(o.non_2xx for o in outs)
            if refused:  # every request is a fresh token on its own key: none may be refused
                log = "\n".join(p.read_text()[-1500:] for p in workdir.glob("*.log"))
                raise RuntimeError(f"{case}: {refused} requests answered non-2xx:\n{log}")
            socket_errors[case] = socket_errors.get(case, 0) + sum(o.errors for o in outs)
            results[case].rates.append(sum(o.requests_per_s for o in outs))
            results[case].latencies += [o.p50_ms / 1000 for o in outs]

    def paired(numerator: str, denominator: str) -> float:
        return paired_ratio(results[numerator], results[denominator])

    # the HTTP stack alone, with no disk, against the naive server: what this machine's CPU and disk allow
    ceiling = paired("in-memory aiohttp", NAIVE)

    def total_cpu(case: str) -> float:
        """Median CPU ms per 1,000 requests of the case's gateway processes plus PostgreSQL's."""
        readings = cpu.get(case, [])
        return statistics.median(g for g, _ in readings) + statistics.median(p for _, p in readings)

    # Where both servers keep the cores busy, the rate ratio is at most the ratio of CPU per request.
    cpu_bound = (
        f"CPU per 1,000 requests (server + PostgreSQL): naive {total_cpu(NAIVE_PG):.0f} ms, fencegate "
        f"{total_cpu(PG):.0f} ms, so where both are CPU-bound the ratio is at most "
        f"{total_cpu(NAIVE_PG) / total_cpu(PG):.2f}x here"
        if cpu.get(NAIVE_PG) and cpu.get(PG)
        else ""
    )
    goals = [
        Goal("SQLite: fenced group commit / naive durable server", paired(SQLITE, NAIVE), ">=", 3,
             f"the HTTP ceiling (in-memory aiohttp, no disk) is {ceiling:.2f}x the naive server here"),
        Goal("SQLite: fence on / fence off", paired(SQLITE, "fencegate SQLite, fence off"), ">=", 0.9),
        Goal("PostgreSQL: fenced group commit / naive durable server", paired(PG, NAIVE_PG), ">=", 3,
             cpu_bound),
        Goal("PostgreSQL / SQLite, both with group commit", paired(PG, SQLITE), ">=", 0.5),
        Goal("PostgreSQL: fence on / fence off", paired(PG, "fencegate PostgreSQL, fence off"), ">=", 0.9),
        Goal("PostgreSQL: 2 replicas / 1 replica", paired("fencegate PostgreSQL, 2 replicas", PG), ">=", 1.0,
             "2 cores: each replica's CPU is taken from the other and from PostgreSQL (performance.md)"),
    ]  # fmt: skip
    extra = {
        "SQLite: the HTTP ceiling (in-memory aiohttp) / naive durable server": ceiling,
        "SQLite: fenced group commit / the stricter naive server (no fence, one thread hop)": paired(
            SQLITE, UNFENCED
        ),
        "PostgreSQL: group commit / a transaction per request": paired(
            PG, "fencegate PostgreSQL, --group-commit 0"
        ),
    }
    extra |= {
        f"reads: {case}: plain GET / fenced PUT req/s, same gateway and run": statistics.median(ratios)
        for case, ratios in reads.items()
    }
    extra |= {
        f"RSS MiB after load: {case}": mib
        for case, mib in memory.items()
        if "fencegate" in case and "fence off" not in case
    }
    for case, readings in cpu.items():
        extra[f"CPU ms per 1,000 requests, {case}: gateway processes"] = statistics.median(
            g for g, _ in readings
        )
        extra[f"CPU ms per 1,000 requests, {case}: PostgreSQL"] = statistics.median(p for _, p in readings)
    extra |= {
        f"wrk socket errors (timeouts at the end of a run): {c}": n for c, n in socket_errors.items() if n
    }
    return Section("gateway", f"durable PUT req/s, 64-byte bodies, wrk -c{CONNECTIONS} "
                   "(p50/p99 over runs' p50)", list(results.values()), goals, extra)  # fmt: skip
