"""Eight clients on one resource with a tiny critical section.

Reports critical sections per second and the hand-off latency (from one
holder's release to the next holder's grant). Peers' waiters sleep between
tries (aioredlock 100-300 ms, pottery up to 200 ms); fencegate's wake on the
release notification. Goal: >= 20x the critical sections per second of both.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable

from bench.env import BenchEnv
from bench.runner import Result
from bench.section import Goal, Section

CLIENTS = 8
TTL_S = 10.0

Span = tuple[float, float]  # (granted, releasing) on the monotonic clock


async def _async_clients(
    make_cycle: Callable[[], Awaitable[Callable[[], Awaitable[Span]]]], seconds: float
) -> list[Span]:
    spans: list[Span] = []
    end = time.monotonic() + seconds

    async def client() -> None:
        cycle = await make_cycle()
        while time.monotonic() < end:
            spans.append(await cycle())

    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return spans


async def _fencegate(env: BenchEnv, seconds: float) -> list[Span]:
    from lockclient import Redlock

    key = f"bench:contend:{uuid.uuid4().hex[:8]}"
    locker = Redlock(env.redis_urls[:5])

    async def make() -> Callable[[], Awaitable[Span]]:
        async def cycle() -> Span:
            lease = await locker.acquire(key, ttl=TTL_S, timeout=30.0)
            granted = time.monotonic()
            releasing = time.monotonic()
            await locker.release(lease)
            return granted, releasing

        return cycle

    try:
        return await _async_clients(make, seconds)
    finally:
        await locker.aclose()


async def _aioredlock(env: BenchEnv, seconds: float) -> list[Span]:
    from aioredlock import Aioredlock, LockError

    key = f"bench:contend:{uuid.uuid4().hex[:8]}"
    hosts = [{"host": "127.0.0.1", "port": int(u.rsplit(":", 1)[1])} for u in env.redis_urls[:5]]
    manager = Aioredlock(hosts)

    async def make() -> Callable[[], Awaitable[Span]]:
        async def cycle() -> Span:
            while True:
                try:
                    lock = await manager.lock(key, lock_timeout=TTL_S)
                    break
                except LockError:
                    continue
            granted = time.monotonic()
            releasing = time.monotonic()
            await manager.unlock(lock)
            return granted, releasing

        return cycle

    try:
        return await _async_clients(make, seconds)
    finally:
        await manager.destroy()


def _pottery(env: BenchEnv, seconds: float) -> list[Span]:
    import redis
    from pottery import Redlock

    key = f"bench:contend:{uuid.uuid4().hex[:8]}"
    masters = {redis.Redis.from_url(u) for u in env.redis_urls[:5]}
    spans: list[Span] = []
    end = time.monotonic() + seconds

    def client() -> None:
        lock = Redlock(key=key, masters=masters, auto_release_time=TTL_S)
        while time.monotonic() < end:
            if not lock.acquire(timeout=30):
                continue
            granted = time.monotonic()
            releasing = time.monotonic()
            lock.release()
            spans.append((granted, releasing))

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for master in masters:
        master.close()
    return spans


def _result(name: str, runs: list[list[Span]], seconds: float) -> Result:
    result = Result("contention", name)
    for spans in runs:
        result.rates.append(len(spans) / seconds)
        ordered = sorted(spans)
        result.latencies += [b[0] - a[1] for a, b in itertools.pairwise(ordered)]
    return result


async def contention(env: BenchEnv) -> Section:
    runs: dict[str, list[list[Span]]] = {"fencegate": [], "aioredlock": [], "pottery Redlock (sync)": []}
    for run in range(env.runs):
        env.progress(f"contention: run {run + 1}/{env.runs}")
        runs["fencegate"].append(await _fencegate(env, env.seconds))
        runs["aioredlock"].append(await _aioredlock(env, env.seconds))
        runs["pottery Redlock (sync)"].append(await asyncio.to_thread(_pottery, env, env.seconds))
    results = [_result(name, spans, env.seconds) for name, spans in runs.items()]
    by = {r.name: r.median_rate for r in results}
    goals = [
        Goal("critical sections/s: fencegate / aioredlock", by["fencegate"] / max(by["aioredlock"], 1e-9),
             ">=", 20),
        Goal("critical sections/s: fencegate / pottery Redlock",
             by["fencegate"] / max(by["pottery Redlock (sync)"], 1e-9), ">=", 20),
    ]  # fmt: skip
    extra = {f"{r.name} hand-off median ms": statistics.median(r.latencies) * 1000
             for r in results if r.latencies}  # fmt: skip
    return Section("contention", f"{CLIENTS} clients, one resource, tiny critical section "
                   "(p50/p99 = hand-off latency)", results, goals, extra)  # fmt: skip
