"""Eight clients on one resource with a tiny critical section, in two workloads.

- rounds (the goals): every client needs the lock once per round. The eight
  start trying together and the round ends when each has held it once, so at
  every hand-off each client that has not had its turn is waiting: this
  measures how fast a *waiting* client gets the lock after a release. Peers' waiters sleep between tries
  (aioredlock 100-300 ms, pottery up to 200 ms); fencegate's wake on the
  release notification. Goal: >= 20x the critical sections per second of both.
- tight loop: every client acquires, releases and acquires again at once. A
  releaser that re-takes the lock before any sleeping waiter wakes never hands
  it over, so this mostly measures one client's uncontended speed; the share
  of hand-offs that went to another client is reported next to it.

Both report critical sections per second and the hand-off latency (from one
holder's release to the next holder's grant; in rounds, only within a round).
Every client has a lock client of its own (its own Redlock, Aioredlock manager
or pottery masters), as separate processes would, and keeps it for the whole
run; fencegate and the peers alternate run by run.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from fencegate.bench.env import BenchEnv
from fencegate.bench.runner import Result
from fencegate.bench.section import Goal, Section

CLIENTS = 8
TTL_S = 10.0
LOOP = "tight loop"
ROUNDS = "rounds"
PEERS = ("fencegate", "aioredlock", "pottery Redlock (sync)")

Span = tuple[float, float]  # (granted, releasing) on the monotonic clock
Held = tuple[float, float, int]  # a span and the client that held it


class Round:
    """One burst: when it started, when its last holder released, and who held the lock when."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.end = start
        self.spans: list[Held] = []

    def close(self, end: float) -> None:
        self.end = end


class _Client(Protocol):
    """One contender with a lock client of its own, as a separate process would have."""

    async def cycle(self) -> Span: ...

    async def aclose(self) -> None: ...


class _SyncClient(Protocol):
    """The same for a sync lock client, run on a thread of its own."""

    def cycle(self) -> Span: ...


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


class _Pottery:
    """pottery's sync Redlock on connections of its own, run on a thread of its own."""

    def __init__(self, urls: list[str], key: str) -> None:
        import redis
        from pottery import Redlock

        logging.getLogger("pottery").setLevel(logging.WARNING)  # it logs every contended acquire at INFO
        self.masters = {redis.Redis.from_url(u) for u in urls}
        self.lock = Redlock(key=key, masters=self.masters, auto_release_time=TTL_S)

    def cycle(self) -> Span:
        while not self.lock.acquire(timeout=30):
            pass
        granted = time.monotonic()
        releasing = time.monotonic()
        self.lock.release()
        return granted, releasing

    def close(self) -> None:
        for master in self.masters:
            master.close()


# -- tight loop ------------------------------------------------------------------------


async def _async_loop(clients: Sequence[_Client], seconds: float) -> list[Held]:
    spans: list[Held] = []
    end = time.monotonic() + seconds

    async def run(number: int, client: _Client) -> None:
        while time.monotonic() < end:
            spans.append((*await client.cycle(), number))

    await asyncio.gather(*(run(number, client) for number, client in enumerate(clients)))
    return spans


def _pottery_loop(clients: Sequence[_SyncClient], seconds: float) -> list[Held]:
    spans: list[Held] = []
    end = time.monotonic() + seconds

    def run(number: int, client: _SyncClient) -> None:
        while time.monotonic() < end:
            spans.append((*client.cycle(), number))

    _on_threads(run, clients)
    return spans


# -- rounds -------------------------------------------------------------------------------


async def _async_rounds(clients: Sequence[_Client], seconds: float) -> list[Round]:
    """Bursts of one cycle per client until `seconds` are spent (at least one round)."""
    rounds: list[Round] = []
    end = time.monotonic() + seconds

    async def once(number: int, client: _Client, now: Round) -> None:
        now.spans.append((*await client.cycle(), number))

    while not rounds or time.monotonic() < end:
        now = Round(time.monotonic())
        await asyncio.gather(*(once(number, client, now) for number, client in enumerate(clients)))
        now.close(time.monotonic())
        rounds.append(now)
    return rounds


def _pottery_rounds(clients: Sequence[_SyncClient], seconds: float) -> list[Round]:
    """The same bursts on threads: a barrier starts each round once every client finished the last."""
    rounds: list[Round] = []
    end = time.monotonic() + seconds
    going = True

    def between() -> None:  # run by one thread once all have reached the barrier
        nonlocal going
        now = time.monotonic()
        if rounds:
            rounds[-1].close(now)
        going = not rounds or now < end
        if going:
            rounds.append(Round(time.monotonic()))

    barrier = threading.Barrier(len(clients), action=between)

    def run(number: int, client: _SyncClient) -> None:
        while True:
            barrier.wait()
            if not going:
                return
            rounds[-1].spans.append((*client.cycle(), number))

    _on_threads(run, clients)
    return rounds


def _on_threads(run: Callable[[int, _SyncClient], None], clients: Sequence[_SyncClient]) -> None:
    threads = [threading.Thread(target=run, args=(n, c)) for n, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# -- one run of each peer: both workloads on the same clients -------------------------------


Run = tuple[list[Held], list[Round]]


async def _run_async(make: Callable[[], _Client], seconds: float) -> Run:
    clients = [make() for _ in range(CLIENTS)]
    try:
        await _async_rounds(clients, 0.0)  # opens every connection (and subscription) untimed
        return await _async_loop(clients, seconds), await _async_rounds(clients, seconds)
    finally:
        for client in clients:
            await client.aclose()


def _run_pottery(urls: list[str], key: str, seconds: float) -> Run:
    clients = [_Pottery(urls, key) for _ in range(CLIENTS)]
    try:
        _pottery_rounds(clients, 0.0)
        return _pottery_loop(clients, seconds), _pottery_rounds(clients, seconds)
    finally:
        for client in clients:
            client.close()


async def _one_run(env: BenchEnv, name: str) -> Run:
    urls = env.redis_urls[:5]
    key = f"bench:contend:{uuid.uuid4().hex[:8]}"
    if name == "fencegate":
        return await _run_async(lambda: _Fencegate(urls, key), env.seconds)
    if name == "aioredlock":
        return await _run_async(lambda: _Aioredlock(urls, key), env.seconds)
    return await asyncio.to_thread(_run_pottery, urls, key, env.seconds)


# -- numbers --------------------------------------------------------------------------------


def _handoffs(spans: list[Held]) -> list[float]:
    return [b[0] - a[1] for a, b in itertools.pairwise(sorted(spans))]


def _loop_result(name: str, runs: list[list[Held]], seconds: float) -> Result:
    result = Result(LOOP, name)
    for spans in runs:
        result.rates.append(len(spans) / seconds)
        result.latencies += _handoffs(spans)
    return result


def _rounds_result(name: str, runs: list[list[Round]]) -> Result:
    result = Result(ROUNDS, name)
    for rounds in runs:
        result.rates.append(CLIENTS * len(rounds) / (rounds[-1].end - rounds[0].start))
        for one in rounds:
            result.latencies += _handoffs(one.spans)
    return result


def _passed_on(runs: list[list[Held]]) -> float:
    """The share of hand-offs that went to another client (the rest: the releaser took it again)."""
    pairs = [(a, b) for spans in runs for a, b in itertools.pairwise(sorted(spans))]
    return sum(a[2] != b[2] for a, b in pairs) / len(pairs) if pairs else 0.0


def _ratio(by: dict[str, float], numerator: str, denominator: str) -> float:
    return by[numerator] / max(by[denominator], 1e-9)


async def contention(env: BenchEnv) -> Section:
    loops: dict[str, list[list[Held]]] = {name: [] for name in PEERS}
    bursts: dict[str, list[list[Round]]] = {name: [] for name in PEERS}
    for run in range(env.runs):
        for name in PEERS:
            env.progress(f"contention: {name} run {run + 1}/{env.runs}")
            loop, rounds = await _one_run(env, name)
            loops[name].append(loop)
            bursts[name].append(rounds)
    results = [_rounds_result(name, bursts[name]) for name in PEERS]
    results += [_loop_result(name, loops[name], env.seconds) for name in PEERS]
    by = {r.name: r.median_rate for r in results if r.group == ROUNDS}
    goals = [
        Goal(f"{ROUNDS}: critical sections/s fencegate / aioredlock", _ratio(by, "fencegate", "aioredlock"),
             ">=", 20),
        Goal(f"{ROUNDS}: critical sections/s fencegate / pottery Redlock",
             _ratio(by, "fencegate", "pottery Redlock (sync)"), ">=", 20),
    ]  # fmt: skip
    extra = {f"{r.group}: {r.name} hand-off median ms": statistics.median(r.latencies) * 1000
             for r in results if r.latencies}  # fmt: skip
    extra |= {f"{ROUNDS}: {name} rounds timed": float(sum(len(r) for r in bursts[name])) for name in PEERS}
    # In the tight loop a client that re-takes the lock it just released is not a hand-off: say how often
    extra |= {f"{LOOP}: {name} share passed to another client": _passed_on(loops[name]) for name in PEERS}
    return Section(
        "contention",
        f"{CLIENTS} clients, one resource, tiny critical section; p50/p99 = hand-off latency. "
        f"'{ROUNDS}' (the goals): all start together, each holds it once per round while the rest wait; "
        f"'{LOOP}': each re-acquires at once (mostly uncontended speed)",
        results,
        goals,
        extra,
    )
