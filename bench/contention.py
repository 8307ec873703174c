"""Eight clients on one resource with a tiny critical section.

Reports critical sections per second and the hand-off latency (from one
holder's release to the next holder's grant). Peers' waiters sleep between
tries (aioredlock 100-300 ms, pottery up to 200 ms); fencegate's wake on the
release notification. Every client has a lock client of its own (its own
Redlock, Aioredlock manager or pottery masters), as separate processes would.
Goal: >= 20x the critical sections per second of both.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from bench.env import BenchEnv
from bench.runner import Result
from bench.section import Goal, Section

CLIENTS = 8
TTL_S = 10.0

Span = tuple[float, float]  # (granted, releasing) on the monotonic clock
Held = tuple[float, float, int]  # a span and the client that held it


class _Client(Protocol):
    """One contender with a lock client of its own, as a separate process would have."""

    async def cycle(self) -> Span: ...

    async def aclose(self) -> None: ...


async def _async_clients(make_client: Callable[[], _Client], seconds: float) -> list[Held]:
    spans: list[Held] = []
    clients = [make_client() for _ in range(CLIENTS)]
    end = time.monotonic() + seconds

    async def run(number: int, client: _Client) -> None:
        while time.monotonic() < end:
            spans.append((*await client.cycle(), number))

    try:
        await asyncio.gather(*(run(number, client) for number, client in enumerate(clients)))
    finally:
        for client in clients:
            await client.aclose()
    return spans


class _Fencegate:
    def __init__(self, urls: list[str], key: str) -> None:
        from lockclient import Redlock

        self.locker = Redlock(urls)
        self.key = key

    async def cycle(self) -> Span:
        lease = await self.locker.acquire(self.key, ttl=TTL_S, timeout=30.0)
        granted = time.monotonic()
        releasing = time.monotonic()
        await self.locker.release(lease)
        return granted, releasing

    async def aclose(self) -> None:
        await self.locker.aclose()


class _Aioredlock:
    def __init__(self, urls: list[str], key: str) -> None:
        from aioredlock import Aioredlock

        self.manager = Aioredlock([{"host": "127.0.0.1", "port": int(u.rsplit(":", 1)[1])} for u in urls])
        self.key = key

    async def cycle(self) -> Span:
        from aioredlock import LockError

        while True:
            try:
                lock = await self.manager.lock(self.key, lock_timeout=TTL_S)
                break
            except LockError:
                continue
        granted = time.monotonic()
        releasing = time.monotonic()
        await self.manager.unlock(lock)
        return granted, releasing

    async def aclose(self) -> None:
        await self.manager.destroy()


async def _fencegate(env: BenchEnv, seconds: float) -> list[Held]:
    key = f"bench:contend:{uuid.uuid4().hex[:8]}"
    return await _async_clients(lambda: _Fencegate(env.redis_urls[:5], key), seconds)


async def _aioredlock(env: BenchEnv, seconds: float) -> list[Held]:
    key = f"bench:contend:{uuid.uuid4().hex[:8]}"
    return await _async_clients(lambda: _Aioredlock(env.redis_urls[:5], key), seconds)


def _pottery(env: BenchEnv, seconds: float) -> list[Held]:
    import redis
    from pottery import Redlock

    key = f"bench:contend:{uuid.uuid4().hex[:8]}"
    spans: list[Held] = []
    end = time.monotonic() + seconds

    def client(number: int) -> None:
        masters = {redis.Redis.from_url(u) for u in env.redis_urls[:5]}  # this client's own connections
        lock = Redlock(key=key, masters=masters, auto_release_time=TTL_S)
        try:
            while time.monotonic() < end:
                if not lock.acquire(timeout=30):
                    continue
                granted = time.monotonic()
                releasing = time.monotonic()
                lock.release()
                spans.append((granted, releasing, number))
        finally:
            for master in masters:
                master.close()

    threads = [threading.Thread(target=client, args=(number,)) for number in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return spans


def _passed_on(runs: list[list[Held]]) -> float:
    """The share of hand-offs that went to another client (the rest: the releaser took it again)."""
    pairs = [(a, b) for spans in runs for a, b in itertools.pairwise(sorted(spans))]
    return sum(a[2] != b[2] for a, b in pairs) / len(pairs) if pairs else 0.0


def _result(name: str, runs: list[list[Held]], seconds: float) -> Result:
    result = Result("contention", name)
    for spans in runs:
        result.rates.append(len(spans) / seconds)
        ordered = sorted(spans)
        result.latencies += [b[0] - a[1] for a, b in itertools.pairwise(ordered)]
    return result


async def contention(env: BenchEnv) -> Section:
    runs: dict[str, list[list[Held]]] = {"fencegate": [], "aioredlock": [], "pottery Redlock (sync)": []}
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
    # A client that re-takes the lock it just released is not a hand-off between waiters: say how often
    extra |= {f"{name} share passed to another client": _passed_on(spans) for name, spans in runs.items()}
    return Section("contention", f"{CLIENTS} clients, one resource, tiny critical section "
                   "(p50/p99 = hand-off latency)", results, goals, extra)  # fmt: skip
