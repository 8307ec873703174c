"""Tokens per second from each source, one at a time and 16 in flight."""

from __future__ import annotations

import asyncio
import time
import uuid

from fencegate.bench.env import BenchEnv
from fencegate.bench.runner import Result
from fencegate.bench.section import Section

IN_FLIGHT = 16
SOURCES = ("sqlite", "postgres", "zookeeper")


async def _measure(env: BenchEnv, kind: str, concurrency: int, result: Result) -> None:
    source = env.tokens(kind)
    resource = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        await source.next_token(resource)  # connect and create outside the timing
        per_worker = max(1, env.ops // concurrency)

        async def worker() -> None:
            for _ in range(per_worker):
                t0 = time.perf_counter()
                await source.next_token(resource)
                result.latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.rates.append(per_worker * concurrency / (time.perf_counter() - start))
    finally:
        await source.aclose()


async def tokens(env: BenchEnv) -> Section:
    results = {(k, c): Result("tokens", f"{k} x{c}") for k in SOURCES for c in (1, IN_FLIGHT)}
    for run in range(env.runs):
        for (kind, concurrency), result in results.items():
            env.progress(f"tokens: {kind} x{concurrency} run {run + 1}/{env.runs}")
            await _measure(env, kind, concurrency, result)
    return Section("tokens", "tokens per second, sequential (x1) and 16 in flight", list(results.values()))
