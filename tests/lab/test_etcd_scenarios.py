"""The etcd lock design through the lab's scenarios, on the suite's real 3-member etcd cluster.

What Jepsen saw in etcd 3.4.3, made to happen on purpose: the holder is
SIGSTOPped past its session TTL, its keepalive stops, etcd expires the lease
and deletes the key, the next waiter holds the lock, and the holder, resumed,
writes. Alone, the lock loses that update; fenced by its key's create
revision, the gateway refuses the write.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

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


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def session(
    tmp_path_factory: pytest.TempPathFactory, etcd_cluster: LocalCluster
) -> AsyncIterator[LabSession]:
    urls = {"etcd": etcd_cluster.etcd}
    async with LabSession.open(tmp_path_factory.mktemp("lab-etcd"), token_urls=urls) as opened:
        yield opened


async def run(session: LabSession, scenario: str, mode: Mode, *, seed: int = 3) -> tuple[History, Verdict]:
    spec = RunSpec(scenario, mode, "etcd", None if mode == "lock-only" else "etcd", seed=seed)
    history = await session.run(spec, PLAN)
    assert (history.meta.scenario, history.meta.mode, history.meta.lock) == (scenario, mode, "etcd")
    verdict = check(history)
    assert verdict.safe is expected_safe(spec)
    return history, verdict


def holders(history: History) -> list[tuple[str, int | None]]:
    """(lease, token) of every acquisition, in acquisition order."""
    return [
        (span.lease, span.token)
        for span in sorted(lease_spans(history.events).values(), key=lambda s: s.start)
    ]


async def test_no_fault_the_etcd_lock_alone_is_a_mutex(session: LabSession) -> None:
    _, verdict = await run(session, "none", "lock-only")
    assert (verdict.lost_updates, verdict.interleaved_leases, verdict.overlaps) == (0, 0, 0)
    assert verdict.final == verdict.acknowledged == PLAN.clients * PLAN.ops


@pytest.mark.parametrize("seed", [1, 2])
async def test_a_pause_past_the_session_ttl_loses_an_update_with_the_lock_alone(
    seed: int, session: LabSession
) -> None:
    history, verdict = await run(session, "pause", "lock-only", seed=seed)
    assert verdict.lost_updates >= 1
    assert verdict.interleaved_leases >= 1
    assert verdict.zombie_requests >= 1  # the holder wrote after the lease it was granted had run out
    assert verdict.refused == 0
    assert all(token is None for _, token in holders(history))  # lock-only: no token leaves the client
    # the resumed holder's release finds its lease expired on etcd: it no longer held anything
    (release,) = [
        e for e in history.events if e.lease == "c1/1" and e.kind == "release" and e.outcome != "sent"
    ]
    assert release.outcome == "refused"


@pytest.mark.parametrize("seed", [1, 2])
async def test_fenced_by_the_create_revision_the_paused_holders_write_is_refused(
    seed: int, session: LabSession
) -> None:
    history, verdict = await run(session, "pause", "fenced", seed=seed)
    assert_the_fence_refused(verdict)
    refused = [e for e in history.events if e.kind == "write" and e.outcome == "refused"]
    assert {e.lease for e in refused} == {"c1/1"}  # the paused holder's write, nothing else
    drawn = [token for _, token in holders(history)]
    assert None not in drawn
    tokens = [token or 0 for token in drawn]
    assert all(a < b for a, b in itertools.pairwise(tokens))  # revisions, rising holder by holder


async def test_fence_only_draws_etcd_revisions_and_is_safe(session: LabSession) -> None:
    history, verdict = await run(session, "pause", "fence-only")
    assert_the_fence_refused(verdict)
    assert all(token is not None for _, token in holders(history))


async def test_a_challenger_clock_ahead_changes_nothing_for_etcd(session: LabSession) -> None:
    """The lease lives on etcd's clock: a client's wall clock cannot expire it."""
    history, verdict = await run(session, "clock-skew", "lock-only")
    assert [e.detail for e in history.events if e.kind == "fault"] == ["c2's wall clock +2s"]
    assert (verdict.lost_updates, verdict.interleaved_leases, verdict.overlaps) == (0, 0, 0)


async def test_redlock_fenced_with_etcd_tokens_is_safe_under_the_pause(session: LabSession) -> None:
    """`--tokens etcd` serves the other designs as a token source (EtcdTokens on the same cluster)."""
    spec = RunSpec("pause", "fenced", "redlock", "etcd", seed=3)
    history = await session.run(spec, PLAN)
    verdict = check(history)
    assert_the_fence_refused(verdict)
    assert all(token is not None for _, token in holders(history))
