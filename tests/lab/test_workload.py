"""The workload's recording rules, with small fakes beside the Protocols (pure logic, no servers).

The same loop on real processes and real redis is covered by test_runner and test_scenarios.
"""

from __future__ import annotations

import random
from pathlib import Path

from fencegate.lab.errors import StoreError
from fencegate.lab.history import EventLog, read_events
from fencegate.lab.protocols import LeaseInfo, StoreReply
from fencegate.lab.workload import Workload, WorkloadSettings
from lockclient.errors import LockNotAcquired


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


class FakeLock:
    def __init__(self, clock: Clock, *, refusals: int = 0, forever: bool = False) -> None:
        self.clock, self.refusals, self.forever, self.released = clock, refusals, forever, 0

    async def acquire(self, resource: str, ttl: float) -> LeaseInfo:
        if self.forever or self.refusals:
            self.refusals -= 1
            raise LockNotAcquired("taken", resource=resource)
        return LeaseInfo(resource=resource, owner="me", token=7, until=self.clock.now + ttl)

    async def release(self, lease: LeaseInfo) -> bool:
        self.released += 1
        return True

    async def aclose(self) -> None:
        return None


class FakeStore:
    def __init__(self, *, read: str = "ok", fail_write: bool = False) -> None:
        self.value, self.seq, self.read_outcome, self.fail_write = 41, 0, read, fail_write

    async def read(self, lease: LeaseInfo) -> StoreReply:
        if self.read_outcome == "refused":
            return StoreReply("refused", detail="stale token")
        self.seq += 1
        return StoreReply("ok", value=self.value, seq=self.seq)

    async def write(self, value: int, lease: LeaseInfo) -> StoreReply:
        if self.fail_write:
            raise StoreError("connection reset")
        self.value, self.seq = value, self.seq + 1
        return StoreReply("ok", value=value, seq=self.seq)

    async def final(self) -> int:
        return self.value

    async def aclose(self) -> None:
        return None


async def run(
    tmp_path: Path, lock: FakeLock, store: FakeStore, clock: Clock, **settings: object
) -> list[str]:
    base = {"client": "c1", "resource": "r", "ops": 1, "ttl": 1.0, "retry_delay": 0.0, "acquire_timeout": 1.0}
    with EventLog(tmp_path / "c1.jsonl") as log:
        workload = Workload(
            WorkloadSettings(**(base | settings)),  # type: ignore[arg-type]
            lock=lock, store=store, log=log, rng=random.Random(1), clock=clock,
        )  # fmt: skip
        await workload.run()
    return [f"{e.kind}:{e.outcome}" for e in read_events(tmp_path / "c1.jsonl")]


async def test_one_iteration_records_every_step_with_sent_and_outcome(tmp_path: Path) -> None:
    clock = Clock()
    steps = await run(tmp_path, FakeLock(clock, refusals=2), FakeStore(), clock)
    assert steps == [
        "acquire:ok",
        "read:sent",
        "read:ok",
        "write:sent",
        "write:ok",
        "release:sent",
        "release:ok",
    ]
    events = read_events(tmp_path / "c1.jsonl")
    assert (events[2].value, events[2].seq, events[4].value, events[4].token) == (41, 1, 42, 7)
    assert events[0].until is not None
    assert events[0].lease == "c1/1"


async def test_a_refused_read_ends_the_iteration_and_still_releases(tmp_path: Path) -> None:
    clock = Clock()
    lock = FakeLock(clock)
    steps = await run(tmp_path, lock, FakeStore(read="refused"), clock)
    assert steps == ["acquire:ok", "read:sent", "read:refused", "release:sent", "release:ok"]
    assert lock.released == 1


async def test_a_failed_write_is_recorded_as_error_and_released(tmp_path: Path) -> None:
    clock = Clock()
    steps = await run(tmp_path, FakeLock(clock), FakeStore(fail_write=True), clock)
    assert steps[-3:] == ["write:error", "release:sent", "release:ok"]


async def test_no_lease_before_the_deadline_records_an_error_and_goes_on(tmp_path: Path) -> None:
    clock = Clock()
    steps = await run(
        tmp_path, FakeLock(clock, forever=True), FakeStore(), clock, ops=2, acquire_timeout=0.01
    )
    assert steps == ["acquire:error", "acquire:error"]
