"""Every scenario, shortened, on real processes and real faults: redis-only loses, the fence does not.

The lock is the single-instance `SET NX PX` lock; the store is the test-only
redis counter (fenced or not) and the tokens come from a redis INCR on a node
no fault touches. The gateway and Redlock rows are the lab's second phase.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from lab.checker import Verdict, check, lease_spans
from lab.client import Component
from lab.cluster import LocalCluster
from lab.errors import FaultError
from lab.history import History, Meta
from lab.scenarios import SCENARIOS, RunPlan, run_scenario
from tests.lab.counter_store import RedisCounter

PLAN = RunPlan(clients=2, ops=2, ttl=1.0, seed=3)
# Where the challenger must get in while the holder's lease runs, and the fault itself (a restart, a
# promotion) eats into that window, a longer TTL keeps a loaded machine from closing it. These
# scenarios never wait for a TTL to pass, so the longer TTL costs no time.
LONG_TTL = {"clock-jump", "restart", "failover", "token-regress"}


@dataclass
class CounterDeployment:
    """One mode over the single lock and the test-only store."""

    mode: str
    url: str
    key: str
    design: str = "single"
    source: str = "redis-incr"
    lock_nodes: int = 1

    @property
    def store_address(self) -> tuple[str, int]:
        host, port = self.url.removeprefix("redis://").split(":")
        return host, int(port)

    def lock(self, urls: Sequence[str], *, tokens: str) -> Component:
        # "stable": tokens from a redis no fault touches, standing in for ZooKeeper or Postgres
        source = {"tokens": self.url if self.source == "stable" else tokens, "key": f"{self.key}:tokens"}
        if self.mode == "redis-only":
            factory = {"single": "lab.locks:SingleLock", "setnx-getset": "lab.locks:SetnxGetsetLock"}[
                self.design
            ]
            return Component(factory, {"url": urls[0]})
        if self.mode == "fenced":
            return Component("tests.lab.counter_store:TokenSingleLock", {"url": urls[0], **source})
        return Component("tests.lab.counter_store:TokenOnly", source)

    def store(self, address: tuple[str, int]) -> Component:
        url = f"redis://{address[0]}:{address[1]}"
        kwargs = {"url": url, "key": self.key, "fenced": self.mode != "redis-only"}
        return Component("tests.lab.counter_store:RedisCounter", kwargs)

    async def final(self) -> int:
        store = RedisCounter(self.url, self.key)
        try:
            return await store.final()
        finally:
            await store.aclose()


async def run(
    scenario: str,
    mode: str,
    redis_cluster: LocalCluster,
    tmp_path: Path,
    design: str = "single",
    source: str = "redis-incr",
) -> Verdict:
    key = f"scenario-{uuid.uuid4().hex[:8]}"
    deployment = CounterDeployment(mode, redis_cluster.redis_urls[4], key, design, source)
    tokens = None if mode == "redis-only" else source
    meta = Meta(scenario, mode, design, PLAN.seed, tokens=tokens, clients=PLAN.clients)
    plan = replace(PLAN, ttl=3.0) if scenario in LONG_TTL else PLAN
    history = await run_scenario(SCENARIOS[scenario], deployment, plan=plan, meta=meta, workdir=tmp_path)
    history.dump(tmp_path / "history.jsonl")
    assert history.meta.scenario == scenario
    return check(history)


UNSAFE = ["pause", "delay", "clock-jump", "restart", "failover"]


@pytest.mark.parametrize("scenario", UNSAFE)
async def test_redis_only_loses_an_update_and_interleaves(
    scenario: str, redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    verdict = await run(scenario, "redis-only", redis_cluster, tmp_path)
    assert verdict.lost_updates >= 1
    assert verdict.interleaved_leases >= 1
    assert verdict.acknowledged == PLAN.clients * PLAN.ops
    if scenario == "pause":
        assert verdict.zombie_requests >= 1  # the holder wrote after its lease ended
    if scenario in ("clock-jump", "restart", "failover"):
        assert verdict.overlaps >= 1  # two holders by their own clocks


@pytest.mark.parametrize("scenario", [*UNSAFE, "restart-delayed"])
async def test_fenced_loses_nothing_and_refuses_the_stale_request(
    scenario: str, redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    verdict = await run(scenario, "fenced", redis_cluster, tmp_path)
    assert (verdict.lost_updates, verdict.interleaved_leases) == (0, 0)
    if scenario != "restart-delayed":
        assert verdict.refused >= 1


async def test_the_delayed_restart_keeps_even_redis_only_safe(
    redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    verdict = await run("restart-delayed", "redis-only", redis_cluster, tmp_path)
    assert (verdict.lost_updates, verdict.interleaved_leases, verdict.overlaps) == (0, 0, 0)
    assert verdict.acknowledged == PLAN.clients * PLAN.ops


async def test_fence_only_is_safe_without_a_lock(redis_cluster: LocalCluster, tmp_path: Path) -> None:
    verdict = await run("pause", "fence-only", redis_cluster, tmp_path)
    assert (verdict.lost_updates, verdict.interleaved_leases, verdict.overlaps) == (0, 0, 0)
    assert verdict.refused >= 1


@pytest.mark.parametrize(("scenario", "safe"), [("restart", False), ("clock-jump", True)])
async def test_setnx_getset_forgets_on_restart_but_ignores_the_servers_clock(
    scenario: str, safe: bool, redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The SETNX pattern keeps its expiry in the value, by the clients' clocks: redis's clock is moot."""
    verdict = await run(scenario, "redis-only", redis_cluster, tmp_path, design="setnx-getset")
    assert verdict.safe is safe
    assert (verdict.overlaps == 0) is safe


async def test_tokens_that_go_back_let_a_stale_write_through_the_fence(
    redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The INCR source restarts with the lock node: the next holder draws the holder's own token again."""
    verdict = await run("token-regress", "fenced", redis_cluster, tmp_path)
    assert verdict.lost_updates >= 1
    assert verdict.interleaved_leases >= 1
    spans = sorted(
        lease_spans(History.load(tmp_path / "history.jsonl").events).values(), key=lambda s: s.start
    )
    tokens = [span.token for span in spans]
    assert tokens[:2] == [1, 1]  # the second holder drew the first holder's token again: the fence sees one


async def test_tokens_that_never_go_back_keep_the_fence_safe(
    redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    verdict = await run("token-regress", "fenced", redis_cluster, tmp_path, source="stable")
    assert (verdict.lost_updates, verdict.interleaved_leases) == (0, 0)
    assert verdict.refused >= 1


async def test_a_scenario_needs_two_clients(redis_cluster: LocalCluster, tmp_path: Path) -> None:
    deployment = CounterDeployment("redis-only", redis_cluster.redis_urls[4], "x")
    with pytest.raises(FaultError, match="at least 2 clients"):
        await run_scenario(SCENARIOS["pause"], deployment, plan=RunPlan(clients=1), meta=Meta("", "", "", 0),
                           workdir=tmp_path)  # fmt: skip
