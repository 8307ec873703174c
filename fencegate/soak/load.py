"""The soak's load and faults: K leased clients against two gateway replicas on one PostgreSQL.

Everything runs on loopback, on servers of its own (the cluster helper): five
Redis masters for the leases, ZooKeeper for the tokens (clients draw from it
and both gateways guard against tokens from the future with it), PostgreSQL
for the store. While the clients loop (lease, fenced read, write + 1,
release), the faults are injected one after the other, each at its share of
the run: `kill -9` of one gateway and its restart on the same port,
PostgreSQL stopped for a few seconds, a Redis master SIGSTOPped, ZooKeeper
restarted. A poller reads the marks one after the other throughout. The run
is bounded: `duration` plus the time to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from sqlalchemy import func, select

from fencegate.bench.wrk import run_wrk
from fencegate.cli import main as fencegate
from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.cluster.gateway import GatewayProcess
from fencegate.lab.cluster.servers import free_port
from fencegate.soak.history import Call, Final, SoakHistory
from fencegate.soak.writers import Writers
from lockclient import LockClientError, Redlock, RetryPolicy, ZooKeeperTokens
from storage import open_engine
from storage.models import AuditEntry, StoredObject
from storage.verify import AuditReport, verify_audit

log = logging.getLogger("soak")

SPEC = ClusterSpec(redis=5, zookeeper=True, postgres=True)
PREFIX = "soak-"
REQUEST_TIMEOUT = 10.0  # seconds a client waits for one answer
LOCK_TIMEOUT = 5.0  # seconds a client tries to take a lease before counting a lock failure
BENCH_CONNECTIONS = 32  # wrk connections of the burst, as in `fencegate bench`
BENCH_WARMUP = 1.0  # seconds of wrk before the burst, not counted
POLL_EVERY = 0.2  # seconds between mark polls
PAUSE_TTLS = 1.5  # a paused holder sleeps this many TTLs between its read and its write
RETRY_DEADLINE = 15.0  # seconds a write is retried before its outcome stays unknown: past every outage
RETRY_FIRST, RETRY_MOST = 0.05, 0.5  # seconds between a write's attempts: first, then doubling up to most
UNKNOWN = (None, 503)  # answers that leave a write's outcome open: retried
STOP_DEADLINE = 5.0  # seconds SIGSTOPped processes have to show as stopped
STOPPED = ("T", "t")
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
class Fault:
    what: str
    start: float
    end: float


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


def pause_postgres(cluster: LocalCluster) -> str:
    """SIGSTOP the postmaster and every process under it, and wait until /proc shows each one stopped.

    The backends run in sessions of their own (a signal to the postmaster's
    group misses them); a paused backend holds its connection open without
    answering, so PostgreSQL is unreachable while it runs.
    """
    cluster.pause("postgres-0")
    pids = cluster.postgres_pids()
    end = time.monotonic() + STOP_DEADLINE
    while (running := [p for p in pids if _state(p) not in STOPPED]) and time.monotonic() < end:
        time.sleep(0.01)
    sessions = len({_session(p) for p in pids} - {None})
    return f"{len(pids) - len(running)} of {len(pids)} processes stopped, in {sessions} sessions"


def _state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped); "" once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


class Soak:
    """One run: `await Soak(config, state_dir).run(cluster)`."""

    def __init__(self, config: SoakConfig, state_dir: Path) -> None:
        self.config = config
        self.dir = state_dir
        self.history = SoakHistory()
        self.faults: list[Fault] = []
        self.gateways: list[GatewayProcess] = []
        self.urls: list[str] = []
        self.secret = ""
        self._stop = asyncio.Event()
        self._rng = random.Random(config.seed)
        self._t0 = time.monotonic()
        # Faults and process control run on threads of their own: while ZooKeeper is down, the
        # token sources' calls block the loop's default executor, and a restart queued behind
        # them would never run.
        self._ops = ThreadPoolExecutor(max_workers=2, thread_name_prefix="soak-ops")

    async def _blocking(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._ops, call)

    def now(self) -> float:
        return time.monotonic() - self._t0

    # -- set-up ---------------------------------------------------------------

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

    # -- the clients ----------------------------------------------------------

    async def _call(
        self,
        session: aiohttp.ClientSession,
        client: int,
        method: str,
        key: str,
        token: int,
        body: bytes = b"",
        *,
        resource: str | None = None,
        idempotency_key: str = "",
        into: list[Call] | None = None,
    ) -> Call:
        """One request to a gateway picked at random, recorded in `into` (the leased clients' calls)."""
        gateway = self._rng.randrange(len(self.urls))
        headers = {"Authorization": f"Bearer {self.secret}", "Fencing-Token": str(token)}
        if resource is not None:
            headers["Fencing-Resource"] = resource
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        start = self.now()
        status: int | None = None
        data, version = b"", None
        try:
            async with session.request(
                method, f"{self.urls[gateway]}/v1/objects/{key}", data=body or None, headers=headers
            ) as resp:
                status, data = resp.status, await resp.read()
                if resp.status in (200, 201):
                    version = int(resp.headers.get("Object-Version", "0")) if method == "GET" else None
                    if method == "PUT":
                        version = int((await resp.json())["version"])
        except (TimeoutError, aiohttp.ClientError):
            status = None
        call = Call(
            client, gateway, method, key, token, body, start, self.now(), status, version,
            idempotency_key, data if status in (200, 201) else b"", resource or "",
        )  # fmt: skip
        (self.history.calls if into is None else into).append(call)
        return call

    async def put(
        self,
        session: aiohttp.ClientSession,
        client: int,
        key: str,
        token: int,
        body: bytes,
        *,
        resource: str | None = None,
        into: list[Call] | None = None,
    ) -> Call:
        """PUT until a definite answer (neither none nor 503) or RETRY_DEADLINE, every attempt with the
        same Idempotency-Key, token and body, so a write whose answer was lost is applied once.

        A write that took retries and was accepted is sent once more: its answer must be the same.
        """
        kw: dict[str, Any] = {
            "resource": resource,
            "idempotency_key": f"c{client}-{key}-{token}",
            "into": into,
        }
        deadline = time.monotonic() + RETRY_DEADLINE
        delay = RETRY_FIRST
        call = await self._call(session, client, "PUT", key, token, body, **kw)
        attempts = 1
        while call.status in UNKNOWN and time.monotonic() + delay < deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MOST)
            call = await self._call(session, client, "PUT", key, token, body, **kw)
            attempts += 1
        if attempts > 1 and call.status in (200, 201):
            await self._call(session, client, "PUT", key, token, body, **kw)
        return call

    async def _client(self, client: int, locker: Redlock[int], session: aiohttp.ClientSession) -> None:
        rng = random.Random(self.config.seed * 1000 + client)
        seq = 0
        while not self._stop.is_set():
            resource = f"{PREFIX}r{rng.randrange(self.config.resources)}"
            try:
                async with locker.lock(resource, ttl=self.config.ttl, timeout=LOCK_TIMEOUT) as lease:
                    read = await self._call(session, client, "GET", resource, lease.token)
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
                    await self.put(session, client, resource, lease.token, body)
            except LockClientError:
                self.history.lock_failures += 1
                await asyncio.sleep(0.05)

    async def _poll_marks(self, session: aiohttp.ClientSession) -> None:
        headers = {"Authorization": f"Bearer {self.secret}"}
        turn = 0
        while not self._stop.is_set():
            resource = f"{PREFIX}r{turn % self.config.resources}"
            url = self.urls[turn % len(self.urls)]
            turn += 1
            try:
                async with session.get(f"{url}/v1/fences/{resource}", headers=headers) as resp:
                    if resp.status == 200:
                        self.history.marks.append((resource, int((await resp.json())["highest"])))
            except (TimeoutError, aiohttp.ClientError):
                pass
            await asyncio.sleep(POLL_EVERY)

    # -- faults ---------------------------------------------------------------

    async def _fault(
        self, what: str, begin: Callable[[], str | None], end: Callable[[], object], hold: float
    ) -> Fault:
        """`begin` may return what it did in detail, added to `what`."""
        start = self.now()
        log.warning("soak %.1f s: %s", start, what)
        detail = await self._blocking(begin)
        what = what if detail is None else f"{what} ({detail})"
        down = self.now()
        await asyncio.sleep(hold)
        up = self.now()
        await self._blocking(end)
        fault = Fault(what, start, self.now())
        log.warning("soak %.1f s: %s: back", fault.end, what)
        self.faults.append(fault)
        if what.startswith("PostgreSQL"):
            self.history.outages.append((down, up))
        return fault

    async def _faults(self, cluster: LocalCluster) -> None:
        cfg = self.config
        steps: list[tuple[float, Callable[[], Awaitable[Fault]]]] = [
            (
                0.1,
                lambda: self._fault("kill -9 gateway-0, restart", self._kill9_0, self._restart_0, 1.0),
            ),
            (
                0.27,
                lambda: self._fault(
                    f"PostgreSQL stopped {cfg.outage:g} s",
                    lambda: cluster.stop("postgres-0"),
                    lambda: cluster.restart("postgres-0"),
                    cfg.outage,
                ),
            ),
            (
                0.44,
                lambda: self._fault(
                    f"PostgreSQL SIGSTOPped {cfg.outage:g} s",
                    lambda: pause_postgres(cluster),
                    lambda: cluster.resume("postgres-0"),
                    cfg.outage,
                ),
            ),
            (
                0.61,
                lambda: self._fault(
                    f"SIGSTOP redis-0 {cfg.outage:g} s",
                    lambda: cluster.pause("redis-0"),
                    lambda: cluster.resume("redis-0"),
                    cfg.outage,
                ),
            ),
            (
                0.78,
                lambda: self._fault(
                    "ZooKeeper restarted",
                    lambda: cluster.stop("zookeeper-0"),
                    lambda: cluster.restart("zookeeper-0"),
                    0.5,
                ),
            ),
        ]
        for share, step in steps:
            delay = share * cfg.duration - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            await step()

    def _kill9_0(self) -> None:
        self.gateways[0].kill9()

    def _restart_0(self) -> None:
        self.gateways[0].start()

    # -- the run --------------------------------------------------------------

    async def _bench(self) -> tuple[float | None, int]:
        """The two gateways' fenced PUT/s in an unfaulted wrk burst, and its non-2xx answers (none is
        expected: fresh keys, token 1). One wrk per replica, half the connections each, as `fencegate
        bench` drives two replicas; a first second, not counted, has each gateway learn the token
        source's bound for the burst's 1,024 resources (one ZooKeeper read each), as a running one has."""
        if self.config.bench_seconds <= 0:
            return None, 0
        rate, refused = 0.0, 0
        for seconds, label in ((BENCH_WARMUP, "warm-up"), (self.config.bench_seconds, "burst")):
            results = await asyncio.gather(
                *(
                    asyncio.to_thread(
                        run_wrk,
                        url,
                        seconds=seconds,
                        connections=BENCH_CONNECTIONS // len(self.urls),
                        workdir=self._wrk_dir(i),
                        prefix=f"{PREFIX}{label}{i}-",
                        resource_prefix=f"{PREFIX}bench-",
                        api_key=self.secret,
                    )
                    for i, url in enumerate(self.urls)
                )
            )
            log.info("wrk %s: %s", label, results)
            rate = sum(r.requests_per_s for r in results)
            refused += sum(r.non_2xx for r in results)
        return rate, refused

    def _wrk_dir(self, replica: int) -> Path:
        path = self.dir / f"wrk-{replica}"
        path.mkdir(exist_ok=True)
        return path

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
        try:
            async with aiohttp.ClientSession(
                timeout=timeout, connector=aiohttp.TCPConnector(limit=0)
            ) as session:

                async def put_unleased(
                    client: int, key: str, token: int, body: bytes, *, resource: str
                ) -> Call:
                    return await self.put(
                        session, client, key, token, body, resource=resource, into=self.history.unleased
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
                workers = [asyncio.create_task(self._client(i, lk, session)) for i, lk in enumerate(lockers)]
                workers.append(asyncio.create_task(self._poll_marks(session)))
                workers.append(asyncio.create_task(writers.run()))
                if cfg.faults:
                    await self._faults(cluster)
                await asyncio.sleep(max(0.0, cfg.duration - self.now()))
                self._stop.set()
                await asyncio.wait_for(
                    asyncio.gather(*workers), LOCK_TIMEOUT + RETRY_DEADLINE + REQUEST_TIMEOUT * 2
                )
                elapsed = self.now()
                finals = await self._finals(session)
        finally:
            await tokens.aclose()
            for locker in lockers:
                await locker.aclose()
            for proc in self.gateways:
                await self._blocking(proc.stop)
            self._ops.shutdown(wait=False)
        audited, objects, audit = await self._audit(cluster)
        return LoadResult(
            self.history, finals, objects, audited, audit, bench_rate, bench_refused, self.faults, elapsed
        )

    async def _finals(self, session: aiohttp.ClientSession) -> dict[str, Final]:
        headers = {"Authorization": f"Bearer {self.secret}"}
        finals = {}
        for r in range(self.config.resources):
            key = f"{PREFIX}r{r}"
            async with session.get(f"{self.urls[1]}/v1/objects/{key}", headers=headers) as resp:
                body = await resp.read() if resp.status == 200 else None
                version = int(resp.headers["Object-Version"]) if resp.status == 200 else None
            async with session.get(f"{self.urls[0]}/v1/fences/{key}", headers=headers) as resp:
                mark = int((await resp.json())["highest"])
            finals[key] = Final(body, version, mark)
        return finals

    async def _audit(
        self, cluster: LocalCluster
    ) -> tuple[Counter[tuple[str, int]], dict[str, tuple[bytes, int]], AuditReport]:
        """Accepted PUTs per (key, token) in the audit trail, the unleased writers' objects, the check."""
        assert cluster.postgres_dsn is not None
        engine = open_engine(cluster.postgres_dsn)
        try:
            async with engine.connect() as conn:
                stmt = (
                    select(AuditEntry.key, AuditEntry.token, func.count())
                    .where(AuditEntry.method == "PUT", AuditEntry.outcome == "accepted")
                    .group_by(AuditEntry.key, AuditEntry.token)
                )
                audited: Counter[tuple[str, int]] = Counter(
                    {
                        (str(key), int(token or 0)): count
                        for key, token, count in (await conn.execute(stmt)).all()
                    }
                )
                rows = await conn.execute(
                    select(StoredObject.key, StoredObject.data, StoredObject.version).where(
                        StoredObject.key.startswith(f"{PREFIX}w", autoescape=True)
                    )
                )
                objects = {str(key): (bytes(data), int(version)) for key, data, version in rows.all()}
            return audited, objects, await verify_audit(engine)
        finally:
            await engine.dispose()
