"""The soak's fault schedule: five faults one after the other, each at its share of the run.

`kill -9` of one gateway and its restart on the same port, PostgreSQL
stopped for a few seconds, PostgreSQL SIGSTOPped (every process of it), a
Redis master SIGSTOPped, ZooKeeper restarted. Each fault is recorded with
when it began and ended, seconds into the run; a PostgreSQL outage also as
the window the history excuses its unanswered writes in.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TypeVar

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.gateway import GatewayProcess
from fencegate.soak.history import SoakHistory

log = logging.getLogger("soak")

STOP_DEADLINE = 5.0  # seconds SIGSTOPped processes have to show as stopped
STOPPED = ("T", "t")
# each fault's start, as a share of the run's duration
SHARES = {"gateway": 0.1, "postgres stop": 0.27, "postgres pause": 0.44, "redis": 0.61, "zookeeper": 0.78}
T = TypeVar("T")


@dataclass
class Fault:
    what: str
    start: float
    end: float


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


class FaultSchedule:
    """The faults of one run on `cluster` and `gateways`; process control runs on `ops`, threads of the
    run's own (while ZooKeeper is down, the token sources' calls block the loop's default executor, and
    a restart queued behind them would never run); `now` is the run's clock."""

    def __init__(
        self, cluster: LocalCluster, gateways: list[GatewayProcess], *, history: SoakHistory,
        ops: Executor, now: Callable[[], float],
    ) -> None:  # fmt: skip
        self.cluster = cluster
        self.gateways = gateways
        self.history = history
        self.faults: list[Fault] = []
        self._ops = ops
        self._now = now

    async def run(self, *, duration: float, outage: float) -> None:
        """Each fault at its share of `duration`, the outages `outage` seconds long."""
        cluster = self.cluster
        steps: list[tuple[float, Callable[[], Awaitable[Fault]]]] = [
            (
                SHARES["gateway"],
                lambda: self._fault(
                    "kill -9 gateway-0, restart", self.gateways[0].kill9, self._restart_0, 1.0
                ),
            ),
            (
                SHARES["postgres stop"],
                lambda: self._fault(
                    f"PostgreSQL stopped {outage:g} s",
                    lambda: cluster.stop("postgres-0"),
                    lambda: cluster.restart("postgres-0"),
                    outage,
                ),
            ),
            (
                SHARES["postgres pause"],
                lambda: self._fault(
                    f"PostgreSQL SIGSTOPped {outage:g} s",
                    lambda: pause_postgres(cluster),
                    lambda: cluster.resume("postgres-0"),
                    outage,
                ),
            ),
            (
                SHARES["redis"],
                lambda: self._fault(
                    f"SIGSTOP redis-0 {outage:g} s",
                    lambda: cluster.pause("redis-0"),
                    lambda: cluster.resume("redis-0"),
                    outage,
                ),
            ),
            (
                SHARES["zookeeper"],
                lambda: self._fault(
                    "ZooKeeper restarted",
                    lambda: cluster.stop("zookeeper-0"),
                    lambda: cluster.restart("zookeeper-0"),
                    0.5,
                ),
            ),
        ]
        for share, step in steps:
            delay = share * duration - self._now()
            if delay > 0:
                await asyncio.sleep(delay)
            await step()

    async def _blocking(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._ops, call)

    def _restart_0(self) -> None:
        self.gateways[0].start()

    async def _fault(
        self, what: str, begin: Callable[[], str | None], end: Callable[[], object], hold: float
    ) -> Fault:
        """`begin` may return what it did in detail, added to `what`."""
        start = self._now()
        log.warning("soak %.1f s: %s", start, what)
        detail = await self._blocking(begin)
        what = what if detail is None else f"{what} ({detail})"
        down = self._now()
        await asyncio.sleep(hold)
        up = self._now()
        await self._blocking(end)
        fault = Fault(what, start, self._now())
        log.warning("soak %.1f s: %s: back", fault.end, what)
        self.faults.append(fault)
        if what.startswith("PostgreSQL"):
            self.history.outages.append((down, up))
        return fault
