"""The workload every lab client runs: acquire, read counter, write counter+1, release.

It is written against `LabLock` and `CounterStore` only, so each mode and
lock design plugs in without the loop knowing which it has (fence-only mode
passes a "lock" that draws a token and claims no validity). Every step is
recorded as it happens, with CLOCK_MONOTONIC time: a request's "sent" event
before it leaves, its outcome after the answer; so the checker sees zombies
(sent after the lease ended) and the store's acceptance order (`seq`).

At the checkpoints the lab asks for ("start" before the first iteration;
"acquired", "read", "wrote" per iteration) the loop stops and awaits the lab's go-ahead: that is where a
scenario injects its fault at exactly the right moment.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fencegate.lab.errors import LabError
from fencegate.lab.history import Event, EventLog
from fencegate.lab.protocols import CounterStore, LabLock, LeaseInfo, StoreReply
from lockclient.errors import LockClientError, LockNotAcquired, TokenSourceError

POINTS = ("start", "acquired", "read", "wrote")  # "start" is iteration 0, before the first acquire
# What a failed store request or release may raise; anything else is a bug and ends the client.
REQUEST_ERRORS = (LabError, LockClientError, OSError, TimeoutError)

Checkpoint = Callable[[str, int, str], Awaitable[None]]  # (point, iteration, lease id)


@dataclass(frozen=True)
class WorkloadSettings:
    """One client's share of the run."""

    client: str
    resource: str
    ops: int
    ttl: float
    retry_delay: float = 0.01  # between acquisition attempts, jittered by the seeded rng
    acquire_timeout: float = 30.0  # give up an iteration after this long without a lease
    checkpoints: frozenset[tuple[str, int]] = field(default_factory=frozenset)


class Workload:
    """Runs the loop for one client and records every step in its `EventLog`."""

    def __init__(
        self,
        settings: WorkloadSettings,
        *,
        lock: LabLock,
        store: CounterStore,
        log: EventLog,
        rng: random.Random,
        checkpoint: Checkpoint | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._lock = lock
        self._store = store
        self._log = log
        self._rng = rng
        self._checkpoint = checkpoint
        self._clock = clock

    async def run(self) -> None:
        await self._at("start", 0, "")
        for iteration in range(1, self.settings.ops + 1):
            await self.iteration(iteration)

    async def iteration(self, number: int) -> None:
        lease_id = f"{self.settings.client}/{number}"
        lease = await self._acquire(lease_id)
        if lease is None:
            return
        try:
            await self._at("acquired", number, lease_id)
            read = await self._request("read", lease_id, lease, None)
            if read is None or read.outcome != "ok":
                return
            await self._at("read", number, lease_id)
            await self._request("write", lease_id, lease, (read.value or 0) + 1)
            await self._at("wrote", number, lease_id)
        finally:
            await self._release(lease_id, lease)

    def _record(
        self,
        kind: str,
        lease_id: str,
        lease: LeaseInfo | None,
        outcome: str,
        *,
        value: int | None = None,
        seq: int | None = None,
        until: float | None = None,
        detail: str = "",
    ) -> None:
        token = lease.token if lease is not None else None
        self._log.record(
            Event(
                self._clock(), self.settings.client, kind, lease_id, token, outcome, value, seq, until, detail
            )
        )

    async def _acquire(self, lease_id: str) -> LeaseInfo | None:
        deadline = self._clock() + self.settings.acquire_timeout
        while True:
            try:
                lease = await self._lock.acquire(self.settings.resource, self.settings.ttl)
            except (LockNotAcquired, TokenSourceError) as exc:  # a failed attempt; its token is wasted
                if self._clock() >= deadline:
                    self._record("acquire", lease_id, None, "error", detail=str(exc))
                    return None
                await asyncio.sleep(self.settings.retry_delay * (0.5 + self._rng.random()))
                continue
            self._record("acquire", lease_id, lease, "ok", until=lease.until)
            return lease

    async def _request(
        self, kind: str, lease_id: str, lease: LeaseInfo, value: int | None
    ) -> StoreReply | None:
        self._record(kind, lease_id, lease, "sent", value=value)
        try:
            if value is None:
                reply = await self._store.read(lease)
            else:
                reply = await self._store.write(value, lease)
        except REQUEST_ERRORS as exc:
            self._record(kind, lease_id, lease, "error", value=value, detail=str(exc))
            return None
        shown = reply.value if value is None else value
        self._record(kind, lease_id, lease, reply.outcome, value=shown, seq=reply.seq, detail=reply.detail)
        return reply

    async def _release(self, lease_id: str, lease: LeaseInfo) -> None:
        self._record("release", lease_id, lease, "sent")
        try:
            released = await self._lock.release(lease)
        except REQUEST_ERRORS as exc:
            self._record("release", lease_id, lease, "error", detail=str(exc))
            return
        self._record("release", lease_id, lease, "ok" if released else "refused")

    async def _at(self, point: str, number: int, lease_id: str) -> None:
        if self._checkpoint is not None and (point, number) in self.settings.checkpoints:
            await self._checkpoint(point, number, lease_id)
