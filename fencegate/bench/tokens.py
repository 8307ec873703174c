"""Tokens per second from each source, one at a time and 16 in flight, in the same run.

Draws in flight at once share round trips (`lockclient.tokens._batch`), so
16 in flight should beat one at a time; the goal is PostgreSQL's ratio
(>= 2x), and every source's ratio is reported beside it. ZooKeeper and etcd
can share a request only between distinct resources (one multi or one
transaction gives all its writes one number), so they also run 16 in flight
over 16 resources.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from fencegate.bench.env import BenchEnv
from fencegate.bench.runner import Result, paired_ratio
from fencegate.bench.section import Goal, Section

IN_FLIGHT = 16
SOURCES = ("sqlite", "postgres", "zookeeper", "etcd")
DISTINCT = ("zookeeper", "etcd")  # sources whose requests batch distinct resources only
GOAL = ("postgres", 2.0)  # PostgreSQL, 16 in flight >= 2x one at a time


def _cases() -> list[tuple[str, int, int]]:
    """(source, draws in flight, resources) for every case, in the order each run takes them."""
    cases = []
    for kind in SOURCES:
        cases += [(kind, 1, 1), (kind, IN_FLIGHT, 1)]
        if kind in DISTINCT:
            cases.append((kind, IN_FLIGHT, IN_FLIGHT))
    return cases


def _name(kind: str, concurrency: int, resources: int) -> str:
    return f"{kind} x{concurrency}" + (f" over {resources} resources" if resources > 1 else "")


async def _measure(env: BenchEnv, kind: str, concurrency: int, resources: int, result: Result) -> None:
    source = env.tokens(kind)
    names = [f"bench-{uuid.uuid4().hex[:8]}" for _ in range(resources)]
    try:
        for name in names:
            await source.next_token(name)  # connect and create outside the timing
        per_worker = max(1, env.ops // concurrency)

        async def worker(name: str) -> None:
            for _ in range(per_worker):
                t0 = time.perf_counter()
                await source.next_token(name)
                result.latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        await asyncio.gather(*(worker(names[i % resources]) for i in range(concurrency)))
        result.rates.append(per_worker * concurrency / (time.perf_counter() - start))
    finally:
        await source.aclose()


async def tokens(env: BenchEnv) -> Section:
    cases = _cases()
    results = {case: Result("tokens", _name(*case)) for case in cases}
    for run in range(env.runs):
        for case in cases:
            env.progress(f"tokens: {_name(*case)} run {run + 1}/{env.runs}")
            await _measure(env, *case, results[case])
    ratios = {kind: paired_ratio(results[(kind, IN_FLIGHT, 1)], results[(kind, 1, 1)]) for kind in SOURCES}
    extra = {f"{kind}: x{IN_FLIGHT} / x1 (same-run pairs)": ratios[kind] for kind in SOURCES}
    extra |= {
        f"{kind}: x{IN_FLIGHT} over {IN_FLIGHT} resources / x1": paired_ratio(
            results[(kind, IN_FLIGHT, IN_FLIGHT)], results[(kind, 1, 1)]
        )
        for kind in DISTINCT
    }
    kind, bound = GOAL
    goals = [Goal(f"{kind} tokens: x{IN_FLIGHT} / x1", ratios[kind], ">=", bound)]
    title = f"tokens per second, one at a time (x1) and {IN_FLIGHT} in flight"
    return Section("tokens", title, list(results.values()), goals, extra)
