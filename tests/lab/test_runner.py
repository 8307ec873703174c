"""The runner on real client processes: a clean run, and Kleppmann's pause with a real SIGSTOP."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from fencegate.lab.checker import check
from fencegate.lab.client import ClientConfig
from fencegate.lab.cluster import LocalCluster
from fencegate.lab.errors import RunnerError
from fencegate.lab.history import Event, Meta
from fencegate.lab.protocols import Component
from fencegate.lab.runner import Checkpoint, ClientProcess, Runner
from fencegate.lab.workload import WorkloadSettings
from tests.lab.counter_store import RedisCounter

STORE = "tests.lab.counter_store:RedisCounter"


def configs(
    tmp_path: Path, url: str, ops: dict[str, int], ttl: float, checkpoints: dict[str, set[tuple[str, int]]]
) -> tuple[list[ClientConfig], str]:
    name = f"runner-{uuid.uuid4().hex[:8]}"
    return [
        ClientConfig(
            settings=WorkloadSettings(
                client=client,
                resource=name,
                ops=n,
                ttl=ttl,
                checkpoints=frozenset(checkpoints.get(client, ())),
            ),
            lock=Component("fencegate.lab.locks:SingleLock", {"url": url}),
            store=Component(STORE, {"url": url, "key": f"{name}:counter"}),
            events=str(tmp_path / f"{client}.jsonl"),
            seed=1,
        )
        for client, n in ops.items()
    ], f"{name}:counter"


async def final_value(url: str, key: str) -> int:
    store = RedisCounter(url, key)
    try:
        return await store.final()
    finally:
        await store.aclose()


def gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")


async def test_three_clients_without_faults_lose_nothing(redis_cluster: LocalCluster, tmp_path: Path) -> None:
    url = redis_cluster.redis_urls[3]
    plans, key = configs(tmp_path, url, {"c1": 4, "c2": 4, "c3": 4}, ttl=5.0, checkpoints={})
    runner = Runner(tmp_path)
    history = await runner.run(plans, meta=Meta("none", "lock-only", "single", 1, clients=3))
    verdict = check(history.with_final(await final_value(url, key)))
    assert (verdict.ops, verdict.acknowledged, verdict.final) == (12, 12, 12)
    assert (verdict.lost_updates, verdict.interleaved_leases, verdict.overlaps, verdict.zombie_requests) == (
        0,
        0,
        0,
        0,
    )
    assert all(gone(c.pid) for c in runner.clients.values())


async def test_a_sigstopped_holder_loses_an_update_without_a_fence(
    redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    """c1 reads, is SIGSTOPped past its TTL; c2 acquires, reads, writes; c1 resumes and writes stale."""
    url = redis_cluster.redis_urls[3]
    plans, key = configs(
        tmp_path, url, {"c1": 1, "c2": 1}, ttl=0.3, checkpoints={"c1": {("read", 1)}, "c2": {("start", 0)}}
    )

    def holder_read(events: list[Event]) -> bool:
        return any(e.client == "c1" and e.kind == "read" and e.outcome == "ok" for e in events)

    async def pause_holder(runner: Runner, client: ClientProcess, at: Checkpoint) -> None:
        if at.point == "start":  # c2 starts once c1 holds the lease and has read
            await runner.wait_for(holder_read, within=30, what="c1's read")
            return
        client.stop()
        runner.note("pause", client.name, "SIGSTOP", lease=at.lease)
        await runner.wait_for(
            lambda events: any(e.client == "c2" and e.kind == "write" and e.outcome == "ok" for e in events),
            within=30,
            what="c2's write",
        )
        client.cont()
        runner.note("resume", client.name, "SIGCONT", lease=at.lease)

    runner = Runner(tmp_path)
    history = await runner.run(
        plans, meta=Meta("pause", "lock-only", "single", 1), on_checkpoint=pause_holder
    )
    verdict = check(history.with_final(await final_value(url, key)))
    assert verdict.acknowledged == 2
    assert verdict.final == 1
    assert verdict.lost_updates == 1
    assert verdict.interleaved_leases == 1
    assert verdict.zombie_requests == 1
    kinds = [(e.client, e.kind) for e in history.events if e.kind in ("pause", "resume")]
    assert kinds == [("c1", "pause"), ("c1", "resume")]


async def test_a_crashing_client_is_reported_and_the_rest_are_killed(
    redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    url = redis_cluster.redis_urls[3]
    plans, _ = configs(tmp_path, url, {"c1": 1}, ttl=5.0, checkpoints={})
    broken = ClientConfig(
        settings=WorkloadSettings(client="c2", resource="x", ops=1, ttl=1.0),
        lock=Component("fencegate.lab.locks:NoSuchLock", {}),
        store=Component(STORE, {"url": url, "key": "x"}),
        events=str(tmp_path / "c2.jsonl"),
        seed=1,
    )
    runner = Runner(tmp_path)
    with pytest.raises(RunnerError, match=r"(?s)c2: exited with status 1.*NoSuchLock"):
        await runner.run([*plans, broken], meta=Meta("none", "lock-only", "single", 1))
    assert all(gone(c.pid) for c in runner.clients.values())


def test_lab_events_are_recorded_with_the_shared_clock(tmp_path: Path) -> None:
    runner = Runner(tmp_path)
    event = runner.note("fault", "c1", "redis-0 killed")
    assert isinstance(event, Event)
    assert (event.kind, event.client, event.outcome) == ("fault", "c1", "ok")
