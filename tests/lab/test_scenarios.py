"""Every scenario, shortened, on Redlock over five real redis masters and a real `fencegate serve`.

One gateway (SQLite storage, the embedded default) serves the whole module;
each run gets fresh redis nodes, proxies, client processes and a fresh
counter key. Tokens come from the suite's shared PostgreSQL (fenced) and
ZooKeeper (fence-only), the consensus-backed sources; token-regress adds the
redis INCR source on the node that restarts. The five-node scenarios cut the
holder off from D and E and the others from A and B, as in Kleppmann's A..E
example.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from fencegate.lab.checker import Verdict, check, lease_spans
from fencegate.lab.cluster import LocalCluster
from fencegate.lab.deployments import Mode
from fencegate.lab.history import History
from fencegate.lab.scenarios import RunPlan
from fencegate.lab.session import LabSession, RunSpec, expected_safe
from tests.lab.verdicts import assert_the_fence_refused

pytestmark = pytest.mark.asyncio(loop_scope="module")

PLAN = RunPlan(clients=2, ops=2, ttl=1.0)
SOURCE: dict[Mode, str | None] = {"lock-only": None, "fenced": "postgres", "fence-only": "zookeeper"}
UNSAFE = ["pause", "delay", "clock-jump", "restart", "failover"]
FIVE_NODE = {"clock-jump", "restart", "restart-delayed", "failover", "token-regress"}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def session(
    tmp_path_factory: pytest.TempPathFactory, zookeeper_cluster: LocalCluster, postgres_cluster: LocalCluster
) -> AsyncIterator[LabSession]:
    urls = {
        "zookeeper": f"zookeeper://{zookeeper_cluster.zookeeper}",
        "postgres": postgres_cluster.postgres_dsn,
    }
    async with LabSession.open(tmp_path_factory.mktemp("lab-session"), token_urls=urls) as opened:
        yield opened


async def run(
    session: LabSession, scenario: str, mode: Mode, *, design: str = "redlock", tokens: str | None = None
) -> tuple[History, Verdict]:
    spec = RunSpec(scenario, mode, design, tokens or SOURCE[mode], seed=3)
    history = await session.run(spec, PLAN)
    assert (history.meta.scenario, history.meta.mode, history.meta.lock) == (scenario, mode, design)
    verdict = check(history)
    assert verdict.safe is expected_safe(spec)
    if design == "redlock" and scenario in FIVE_NODE:
        partition = [e.detail for e in history.events if e.kind == "fault" and "partition" in e.detail]
        assert partition == ["partition: c1 reaches A, B, C; the others reach C, D, E", "partition healed"]
    return history, verdict


@pytest.mark.parametrize("scenario", UNSAFE)
async def test_lock_only_loses_an_update_and_interleaves(scenario: str, session: LabSession) -> None:
    _, verdict = await run(session, scenario, "lock-only")
    assert verdict.lost_updates >= 1
    assert verdict.interleaved_leases >= 1
    assert verdict.acknowledged == PLAN.clients * PLAN.ops
    assert verdict.refused == 0  # the constant token of lock-only mode is never refused
    if scenario == "pause":
        assert verdict.zombie_requests >= 1  # the holder wrote after its lease ended
    if scenario in ("clock-jump", "restart", "failover"):
        assert verdict.overlaps >= 1  # two Redlock holders by their own clocks, each with a majority


@pytest.mark.parametrize("scenario", [*UNSAFE, "restart-delayed"])
async def test_fenced_loses_nothing_and_refuses_the_stale_request(scenario: str, session: LabSession) -> None:
    _, verdict = await run(session, scenario, "fenced")
    assert (verdict.lost_updates, verdict.interleaved_leases) == (0, 0)
    if scenario != "restart-delayed":
        assert verdict.refused >= 1


@pytest.mark.parametrize("scenario", ["pause", "delay"])
async def test_fence_only_is_safe_without_a_lock(scenario: str, session: LabSession) -> None:
    _, verdict = await run(session, scenario, "fence-only")
    assert (verdict.lost_updates, verdict.interleaved_leases, verdict.overlaps) == (0, 0, 0)
    assert verdict.refused >= 1  # the price: work thrown away


async def test_the_delayed_restart_keeps_even_lock_only_safe(session: LabSession) -> None:
    _, verdict = await run(session, "restart-delayed", "lock-only")
    assert (verdict.lost_updates, verdict.interleaved_leases, verdict.overlaps) == (0, 0, 0)
    assert verdict.acknowledged == PLAN.clients * PLAN.ops


async def test_incr_tokens_go_back_and_the_fence_lets_the_stale_write_through(session: LabSession) -> None:
    """The INCR source restarts with node C: the next holder draws the holder's own token again."""
    history, verdict = await run(session, "token-regress", "fenced", tokens="incr")
    assert verdict.lost_updates >= 1
    assert verdict.interleaved_leases >= 1
    spans = sorted(lease_spans(history.events).values(), key=lambda s: s.start)
    assert [span.token for span in spans][:2] == [1, 1]  # equal tokens: the fence sees one lease


@pytest.mark.parametrize("tokens", ["zookeeper", "postgres"])
async def test_consensus_tokens_keep_the_fence_safe_through_the_restart(
    tokens: str, session: LabSession
) -> None:
    history, verdict = await run(session, "token-regress", "fenced", tokens=tokens)
    assert_the_fence_refused(verdict)
    spans = sorted(lease_spans(history.events).values(), key=lambda s: s.start)
    tokens_drawn = [span.token or 0 for span in spans]
    assert tokens_drawn[1] > tokens_drawn[0]  # the next holder's token is above the holder's


@pytest.mark.parametrize(("scenario", "safe"), [("restart", False), ("clock-jump", True)])
async def test_setnx_getset_forgets_on_restart_but_ignores_the_servers_clock(
    scenario: str, safe: bool, session: LabSession
) -> None:
    """The SETNX pattern keeps its expiry in the value, by the clients' clocks: redis's clock is moot."""
    _, verdict = await run(session, scenario, "lock-only", design="setnx-getset")
    assert verdict.safe is safe
    assert (verdict.overlaps == 0) is safe


@pytest.mark.parametrize("mode", ["lock-only", "fenced"])
async def test_a_challenger_whose_clock_runs_ahead_takes_over_a_live_setnx_getset_lock(
    mode: Mode, session: LabSession
) -> None:
    """The SETNX page's pattern compares the holder's timestamp with the challenger's clock: two holders."""
    history, verdict = await run(session, "clock-skew", mode, design="setnx-getset")
    skew = [e.detail for e in history.events if e.kind == "fault"]
    assert skew == ["c2's wall clock +2s"]
    assert verdict.overlaps >= 1  # c2 took the lock while c1's lease was valid by c1's own clock
    if mode == "lock-only":
        assert verdict.lost_updates >= 1
        assert verdict.interleaved_leases >= 1
    else:
        assert_the_fence_refused(verdict)  # the holder's write, under the older token


async def test_a_client_clock_ahead_changes_nothing_for_redlock(session: LabSession) -> None:
    """Redlock's validity is the client's monotonic time and the node's PX: no client wall clock involved."""
    _, verdict = await run(session, "clock-skew", "lock-only")
    assert (verdict.lost_updates, verdict.interleaved_leases, verdict.overlaps) == (0, 0, 0)


async def test_the_one_node_lock_runs_the_one_node_version(session: LabSession) -> None:
    history, verdict = await run(session, "restart", "lock-only", design="single")
    assert not any("partition" in e.detail for e in history.events)
    assert verdict.lost_updates >= 1


async def test_the_gateway_stops_with_the_session(tmp_path: Path) -> None:
    async with LabSession.open(tmp_path) as opened:
        assert opened.gateway is not None
        pid, port = opened.gateway.pid, opened.gateway.port
        _, writer = await asyncio.open_connection("127.0.0.1", port)  # it listens while the session is open
        writer.close()
        await writer.wait_closed()
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # exited and reaped
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)
