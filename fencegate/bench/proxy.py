"""The s3 proxy's cost: fenced PUTs through one and two gateway replicas against the same PUTs sent
straight to SeaweedFS, same run, same concurrency.

16 writers at once over 256 keys, each writer owning 16 of them (one
writer's keys are written by it alone, so no write races another and none
is refused); every object is 1 KiB with the gateway's fencing metadata. The
cases run alternately, run by run, each under a prefix of its own:

- `direct`: `put_object` with aiobotocore on SeaweedFS itself, configured
  as the replicas' client is (`gateway.s3.client_config`), the metadata the
  gateway would write, no precondition;
- `1 replica`: `PUT /v1/objects/{key}` with `Fencing-Token` to one
  `fencegate serve --upstream s3://...` on PostgreSQL, which fences in SQL,
  then writes to SeaweedFS conditional on the version it last wrote;
- `2 replicas`: the same through two replicas on one PostgreSQL, each
  writer sending to one of them (half the writers each).

Every write carries one token (equal tokens pass), and every key is written
once through its case before the timing, so each replica's cache knows the
version it last wrote: the common case, one request to the store per write
(`fencegate_upstream_round_trips` on each replica's /metrics, read before
and after the timed runs, gives the figure). The goal is each
replica case >= 0.7x the direct rate; beside it the bench prints, from the
same runs, the CPU each case spends per write (this process, the replicas,
weed, PostgreSQL), in all and part by part: where the two cores are the
limit, the rate ratio is at most the inverse ratio of those.

Each run goes through every case twice, in two layouts: on shared cores,
and (where there are two CPUs or more) with weed on half of the CPUs and
everything else (this process, the replicas, PostgreSQL) on the other half,
"store on its own core". The goal is judged on the shared layout; the pinned
one is reported. Pinning gives the store a host of its own, but then puts
the replicas, PostgreSQL and the load generator on one core, where a
deployment gives each its own: the direct case's other core carries only
the load generator, so the pinned ratio charges the fenced case for hosts a
deployment would not share, as the shared one does for the store's.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import re
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence

import aiohttp
from aiobotocore.session import get_session

from fencegate.bench.env import BenchEnv
from fencegate.bench.pinning import can_pin, pinned, split_cpus
from fencegate.bench.runner import Result, paired_ratio
from fencegate.bench.section import Goal, Section
from fencegate.bench.servers import cpu_seconds, cpu_used, http_server
from gateway.config import Settings
from gateway.s3 import client_config, send_bodies_at_once
from gateway.transport import RESOURCE, TOKEN

WRITERS = 16
KEYS_PER_WRITER = 16
BODY = b"x" * 1024
FENCE_TOKEN = 1  # every write's token: equal tokens pass, so no case is refused
GOAL = 0.7  # fenced PUTs through the gateway >= 0.7x the same PUTs straight to the store
DIRECT, ONE, TWO = "direct", "1 replica", "2 replicas"
CASES = (DIRECT, ONE, TWO)
ROUND_TRIPS = re.compile(r"^fencegate_upstream_round_trips_(sum|count) (\S+)$", re.MULTILINE)

Write = Callable[[int, str], Awaitable[None]]  # (writer, key) -> one write


def owned(writer: int) -> list[str]:
    """The keys `writer` alone writes."""
    return [f"k{writer:02d}-{index:02d}" for index in range(KEYS_PER_WRITER)]


async def measure(write: Write, picks: Sequence[Sequence[str]], result: Result | None) -> None:
    """Each writer writes its picks one after another, all writers at once; rate and latencies."""

    async def writer(number: int) -> None:
        for key in picks[number]:
            started = time.perf_counter()
            await write(number, key)
            if result is not None:
                result.latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(writer(number) for number in range(WRITERS)))
    if result is not None:
        result.rates.append(sum(map(len, picks)) / (time.perf_counter() - started))


async def round_trips(session: aiohttp.ClientSession, urls: Sequence[str]) -> tuple[float, float]:
    """(sum, count) of `fencegate_upstream_round_trips` over the replicas at `urls`."""
    total = {"sum": 0.0, "count": 0.0}
    for url in urls:
        async with session.get(f"{url}/metrics") as answer:
            for which, value in ROUND_TRIPS.findall(await answer.text()):
                total[which] += float(value)
    return total["sum"], total["count"]


@contextlib.contextmanager
def replicas(env: BenchEnv, s3: Mapping[str, str], dsn: str, prefix: str) -> Iterator[list[tuple[str, int]]]:
    """Two `fencegate serve --upstream s3://BUCKET/PREFIX` on one PostgreSQL: (url, pid) each; stopped on
    the way out. The store's identity is theirs by environment, nothing read from ~/.aws."""
    upstream = [
        "--storage",
        dsn,
        "--upstream",
        f"s3://{s3['bucket']}/{prefix}",
        "--upstream-endpoint",
        s3["endpoint"],
    ]
    identity = {
        "AWS_ACCESS_KEY_ID": s3["access_key"],
        "AWS_SECRET_ACCESS_KEY": s3["secret_key"],
        "AWS_REGION": s3["region"],
        "AWS_CONFIG_FILE": str(env.workdir / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(env.workdir / "no-aws-credentials"),
    }
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(http_server(
                ["fencegate.cli", "--log-level", "WARNING", "serve",
                 "--data-dir", str(env.workdir / f"proxy-{name}"), *upstream],
                env.workdir / f"proxy-{name}.log", identity,
            ))
            for name in "ab"
        ]  # fmt: skip


PARTS = ("bench process", "weed", "replicas", "PostgreSQL")  # where a write's CPU is spent
ALL, STORE_CORE, OTHER_CORE = "all", "the store's core", "the other core"
SHARED, PINNED = "shared cores", "store on its own core"  # the layouts every case runs in, run by run
GROUPS = {SHARED: "s3 proxy", PINNED: "s3 proxy, store on its own core"}


def _cpu_note(direct: float, proxied: float, case: str) -> str:
    return (
        f"CPU per write ({' + '.join(PARTS)}): direct {direct:.0f} µs, "
        f"{case} {proxied:.0f} µs, so where CPU-bound the ratio is at most {direct / proxied:.2f}x here"
    )


async def measure_proxy(
    env: BenchEnv, s3: Mapping[str, str], dsn: str, *, weed: Sequence[int], postgres: Callable[[], list[int]]
) -> Section:
    """The bench on a running SeaweedFS (`s3`: the cluster's endpoints entry, `weed` its PIDs) and
    PostgreSQL (`dsn`, `postgres` its PIDs now: backends come and go)."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}/"
    ops = max(env.ops // WRITERS, 1)
    layouts = (SHARED, PINNED) if can_pin() else (SHARED,)
    cases = {(layout, case): Result(GROUPS[layout], case) for layout in layouts for case in CASES}
    # seconds of CPU per write, per run: each part's, in all, and (pinned) on each side of the split
    parts: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    # the replicas' own client settings: the direct case sends the PUT they send, minus the precondition
    config = client_config(timeout=Settings().upstream_timeout, pool=WRITERS, path_style=True)
    with replicas(env, s3, dsn, prefix) as started:
        async with (
            get_session().create_client(
                "s3",
                endpoint_url=s3["endpoint"],
                region_name=s3["region"],
                aws_access_key_id=s3["access_key"],
                aws_secret_access_key=s3["secret_key"],
                config=config,
            ) as direct,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=WRITERS * 2)) as session,
        ):
            send_bodies_at_once(direct)
            urls = [url for url, _ in started]
            headers = {"Fencing-Token": str(FENCE_TOKEN)}

            async def straight(writer: int, key: str) -> None:
                metadata = {TOKEN: str(FENCE_TOKEN), RESOURCE: f"direct/{key}"}
                await direct.put_object(
                    Bucket=s3["bucket"], Key=f"{prefix}direct/{key}", Body=BODY, Metadata=metadata
                )

            def through(count: int, case: str) -> Write:
                async def put(writer: int, key: str) -> None:
                    url = f"{urls[writer % count]}/v1/objects/{case}/{key}"
                    async with session.put(url, data=BODY, headers=headers) as answer:
                        await answer.read()
                        if answer.status not in (200, 201):
                            raise RuntimeError(
                                f"the proxy bench's PUT answered {answer.status}: see {env.workdir}"
                            )

                return put

            writes: dict[str, Write] = {DIRECT: straight, ONE: through(1, "one"), TWO: through(2, "two")}
            gateways = [pid for _, pid in started]

            def readings() -> dict[str, dict[int, float]]:
                return {
                    "weed": cpu_seconds(weed),
                    "replicas": cpu_seconds(gateways),
                    "PostgreSQL": cpu_seconds(postgres()),
                }

            store_cpus, other_cpus = split_cpus()

            def laid_out(layout: str) -> contextlib.AbstractContextManager[None]:
                if layout == SHARED:
                    return contextlib.nullcontext()
                return pinned(
                    [(lambda: weed, store_cpus), (lambda: [os.getpid(), *gateways, *postgres()], other_cpus)]
                )

            for write in writes.values():  # every key once: the replicas' caches know each key's version
                await measure(write, [owned(writer) for writer in range(WRITERS)], None)
            before = await round_trips(session, urls)
            for run in range(env.runs):
                rng = random.Random(run)
                picks = [[rng.choice(owned(writer)) for _ in range(ops)] for writer in range(WRITERS)]
                for layout, (case, write) in itertools.product(layouts, writes.items()):
                    env.progress(f"proxy: {case} ({layout}) run {run + 1}/{env.runs}")
                    with laid_out(layout):
                        start, own = readings(), time.process_time()
                        await measure(write, picks, cases[layout, case])
                        end, spent = readings(), {"bench process": time.process_time() - own}
                    spent |= {part: cpu_used(start[part], end[part]) for part in start}
                    spent |= {ALL: sum(spent.values()), STORE_CORE: spent["weed"]}
                    spent[OTHER_CORE] = spent[ALL] - spent["weed"]
                    for part, seconds in spent.items():
                        parts[layout, case, part].append(seconds / (ops * WRITERS))
            after = await round_trips(session, urls)
    trips, writes_counted = after[0] - before[0], after[1] - before[1]

    def median_us(layout: str, case: str, part: str) -> float:
        return statistics.median(parts[layout, case, part]) * 1e6

    extra = {f"CPU µs per write, {case}": median_us(SHARED, case, ALL) for case in CASES}
    extra |= {f"CPU µs per write, {case}: {part}": median_us(SHARED, case, part)
              for case in CASES for part in PARTS}  # fmt: skip
    extra["requests to the store per fenced write"] = trips / writes_counted if writes_counted else 0.0
    goals = [
        Goal(f"{case} / direct", paired_ratio(cases[SHARED, case], cases[SHARED, DIRECT]), ">=", GOAL,
             _cpu_note(median_us(SHARED, DIRECT, ALL), median_us(SHARED, case, ALL), case))
        for case in (ONE, TWO)
    ]  # fmt: skip
    if PINNED in layouts:
        extra |= {f"CPU µs per write, {case}, {PINNED}: {side}": median_us(PINNED, case, side)
                  for case in CASES for side in (STORE_CORE, OTHER_CORE)}  # fmt: skip
        for case in (ONE, TWO):
            extra[f"(reported) {case} / direct, {PINNED}"] = paired_ratio(
                cases[PINNED, case], cases[PINNED, DIRECT]
            )
    title = f"fenced PUTs through the s3 proxy vs the same PUTs straight to SeaweedFS, {WRITERS} writers"
    return Section("proxy", title, list(cases.values()), goals, extra)


async def proxy(env: BenchEnv) -> Section:
    """The bench's own SeaweedFS (started on first use) and PostgreSQL."""
    if not any(node.kind == "s3" for node in env.cluster.nodes.values()):
        await asyncio.to_thread(env.cluster.add_s3)
    weed = [node.pid for node in env.cluster.nodes.values() if node.kind == "s3" and node.pid is not None]
    return await measure_proxy(
        env, env.cluster.s3, env.cluster.postgres_dsn, weed=weed, postgres=env.cluster.postgres_pids
    )
