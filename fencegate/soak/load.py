"""The soak's load and faults: K leased clients against two gateway replicas on one PostgreSQL.

Everything runs on loopback, on servers of its own (the cluster helper): five
Redis masters for the leases, ZooKeeper for the tokens (clients draw from it
and both gateways guard against tokens from the future with it), PostgreSQL
for the store. While the clients loop (lease, fenced read, write + 1,
release), the faults of `faults.py` are injected one after the other, and a
poller reads the marks one after the other throughout. Before the load, a wrk
burst measures the unfaulted rate (`burst.py`); after it, the store itself
is read (`audit.py`). Requests go through `client.py`, which records each
one. The run is bounded: `duration` plus the time to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import aiohttp

from fencegate.cli import main as fencegate
from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.cluster.gateway import GatewayProcess
from fencegate.lab.cluster.servers import free_port
from fencegate.soak.audit import read_audit
from fencegate.soak.burst import wrk_burst
from fencegate.soak.client import RETRY_DEADLINE, SoakClient
from fencegate.soak.faults import Fault, FaultSchedule
from fencegate.soak.history import Call, Final, SoakHistory
from fencegate.soak.writers import Writers
from lockclient import LockClientError, Redlock, RetryPolicy, ZooKeeperTokens
from storage.verify import AuditReport

SPEC = ClusterSpec(redis=5, zookeeper=True, postgres=True)
PREFIX = "soak-"
REQUEST_TIMEOUT = 10.0  # seconds a client waits for one answer
LOCK_TIMEOUT = 5.0  # seconds a client tries to take a lease before counting a lock failure
PAUSE_TTLS = 1.5  # a paused holder sleeps this many TTLs between its read and its write
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class SoakConfig:
    duration: float = 60.0
    clients: int = 8
    resources: int = 4
    ttl: float = 3.0  # lease TTL, seconds
    outage: float = 3.0  # seconds PostgreSQL stays stopped and the Redis master stays paused
    faults: bool = True
    pause_rate: float = 0.03  # share of leases whose holder pauses past the TTL before writing
    writers: int = 4  # unleased writers (writers.py)
    in_flight: int = 8  # concurrent requests of each unleased writer
    bench_seconds: float = 3.0  # the unfaulted wrk burst that measures the gateways' rate; 0: none
    rate_goal: float = 1 / 3  # the least rate under faults, over the burst's, that passes; 0: not held
    seed: int = 1


@dataclass
class LoadResult:
    history: SoakHistory
    finals: dict[str, Final]
    objects: dict[str, tuple[bytes, int]]  # the unleased writers' keys after the run: bytes, version
    audited: Counter[tuple[str, int]]
    audit: AuditReport
    bench_rate: float | None  # fenced PUT/s of the wrk burst before the load, None if not measured
    bench_refused: int  # its non-2xx answers: must be 0
    faults: list[Fault] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def fault_window(self) -> tuple[float, float] | None:
        """From the first fault's start to the last one's end, seconds into the run."""
        return (self.faults[0].start, self.faults[-1].end) if self.faults else None


class Soak:
    """One run: `await Soak(config, state_dir).run(cluster)`."""

    def __init__(self, config: SoakConfig, state_dir: Path) -> None:
        self.config = config
        self.dir = state_dir
        self.history = SoakHistory()
        self.gateways: list[GatewayProcess] = []
        self.urls: list[str] = []
        self.secret = ""
        self._stop = asyncio.Event()
        self._t0 = time.monotonic()
        # Faults and process control run on threads of their own: while ZooKeeper is down, the
        # token sources' calls block the loop's default executor, and a restart queued behind
        # them would never run.
        self._ops = ThreadPoolExecutor(max_workers=2, thread_name_prefix="soak-ops")

    async def _blocking(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._ops, call)

    def now(self) -> float:
        return time.monotonic() - self._t0

    def _start_gateways(self, cluster: LocalCluster) -> None:
        keys = self.dir / "keys.json"
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert fencegate(["keys", "--file", str(keys), "add", "soak", "--prefix", PREFIX]) == 0
        self.secret = printed.getvalue().strip()
        assert cluster.postgres_dsn is not None
        assert cluster.zookeeper is not None
        for i in range(2):
            port = free_port()
            proc = GatewayProcess(
                self.dir / f"gateway-{i}.log",
                *("--port", str(port), "--storage", cluster.postgres_dsn, "--api-keys", str(keys)),
                *("--tokens", f"zookeeper://{cluster.zookeeper}", "--storage-timeout", "3"),
            )
            self.urls.append(proc.start())
            self.gateways.append(proc)

    async def _client(self, client: int, locker: Redlock[int], calls: SoakClient) -> None:
        """One leased client's loop: lease, fenced read, write + 1 (sometimes after a pause), release."""
        rng = random.Random(self.config.seed * 1000 + client)
        seq = 0
        while not self._stop.is_set():
            resource = f"{PREFIX}r{rng.randrange(self.config.resources)}"
            try:
                async with locker.lock(resource, ttl=self.config.ttl, timeout=LOCK_TIMEOUT) as lease:
                    read = await calls.call(client, "GET", resource, lease.token)
                    if read.status not in (200, 404):
                        continue
                    value = int(read.answer.split()[0]) if read.status == 200 else 0
                    if rng.random() < self.config.pause_rate:
                        # A holder paused past its lease (a GC pause): a newer holder may write
                        # meanwhile, and then this write must be refused.
                        self.history.pauses += 1
                        await asyncio.sleep(self.config.ttl * PAUSE_TTLS)
                    seq += 1
                    body = f"{value + 1} c{client} s{seq}".encode()
                    await calls.put(client, resource, lease.token, body)
            except LockClientError:
                self.history.lock_failures += 1
                await asyncio.sleep(0.05)

    async def run(self, cluster: LocalCluster) -> LoadResult:
        await self._blocking(lambda: self._start_gateways(cluster))
        assert cluster.zookeeper is not None
        cfg = self.config
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
        retry = RetryPolicy(delay=0.01, jitter=0.05, poll=0.2)
        lockers = [
            Redlock(cluster.redis_urls, tokens=ZooKeeperTokens(cluster.zookeeper), retry=retry)
            for _ in range(cfg.clients)
        ]
        tokens = ZooKeeperTokens(cluster.zookeeper)
        schedule = FaultSchedule(cluster, self.gateways, history=self.history, ops=self._ops, now=self.now)
        keys = [f"{PREFIX}r{r}" for r in range(cfg.resources)]
        try:
            async with aiohttp.ClientSession(
                timeout=timeout, connector=aiohttp.TCPConnector(limit=0)
            ) as session:
                calls = SoakClient(
                    session, urls=self.urls, secret=self.secret, history=self.history, now=self.now,
                    seed=cfg.seed,
                )  # fmt: skip

                async def put_unleased(
                    client: int, key: str, token: int, body: bytes, *, resource: str
                ) -> Call:
                    return await calls.put(
                        client, key, token, body, resource=resource, into=self.history.unleased
                    )

                writers = Writers(
                    put=put_unleased, tokens=tokens, count=cfg.writers, in_flight=cfg.in_flight,
                    prefix=PREFIX, stop=self._stop,
                )  # fmt: skip
                await writers.first_tokens()  # also a token the wrk burst's token 1 is below
                bench_rate, bench_refused = await self._bench()
                for locker in lockers:
                    await locker.connect()
                self._t0 = time.monotonic()
                workers = [asyncio.create_task(self._client(i, lk, calls)) for i, lk in enumerate(lockers)]
                workers.append(asyncio.create_task(calls.poll_marks(keys, self._stop)))
                workers.append(asyncio.create_task(writers.run()))
                if cfg.faults:
                    await schedule.run(duration=cfg.duration, outage=cfg.outage)
                await asyncio.sleep(max(0.0, cfg.duration - self.now()))
                self._stop.set()
                await asyncio.wait_for(
                    asyncio.gather(*workers), LOCK_TIMEOUT + RETRY_DEADLINE + REQUEST_TIMEOUT * 2
                )
                elapsed = self.now()
                finals = await calls.finals(keys)
        finally:
            await tokens.aclose()
            for locker in lockers:
                await locker.aclose()
            for proc in self.gateways:
                await self._blocking(proc.stop)
            self._ops.shutdown(wait=False)
        assert cluster.postgres_dsn is not None
        audited, objects, audit = await read_audit(cluster.postgres_dsn, writers_prefix=f"{PREFIX}w")
        return LoadResult(
            self.history, finals, objects, audited, audit, bench_rate, bench_refused, schedule.faults, elapsed
        )

    async def _bench(self) -> tuple[float | None, int]:
        """The burst's rate and refusals (`burst.py`), or (None, 0) when the config asks for none."""
        if self.config.bench_seconds <= 0:
            return None, 0
        return await wrk_burst(
            self.urls, seconds=self.config.bench_seconds, api_key=self.secret, workdir=self.dir, prefix=PREFIX
        )
