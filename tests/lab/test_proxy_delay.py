"""The lab's `proxy-delay` rows on real SeaweedFS and PostgreSQL: what each predicts, and the store itself.

One lab session over the suite's shared PostgreSQL (tokens and both
replicas' marks) and SeaweedFS. Each run starts two gateway replicas; the
holder sends through replica A, whose path to the store is held from the
holder's read until a challenger wrote through replica B, past the lease's
TTL; in `proxy-delete` the newer lease also deletes the counter before
the held write arrives (the tombstone's case). The verdicts are checked
against what SeaweedFS finally holds, read here with aiobotocore (bytes
and token metadata), not through a gateway.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from fencegate.lab.checker import Verdict, check
from fencegate.lab.cluster import LocalCluster
from fencegate.lab.deployments import Mode
from fencegate.lab.errors import LabArgumentError
from fencegate.lab.history import History
from fencegate.lab.predictions import (
    PROXY_DELAY,
    PROXY_DELETE,
    PROXY_STORES,
    UNCONDITIONAL,
    store_inapplicable,
)
from fencegate.lab.run_cli import run_store
from fencegate.lab.scenarios import RunPlan
from fencegate.lab.session import LabSession, RunSpec, expected_safe, plan_runs, servers_for
from tests.gateway.s3_support import Held, direct_client, held
from tests.lab.verdicts import assert_the_fence_refused

ON_THE_SESSION = pytest.mark.asyncio(loop_scope="module")  # the runs share the module's session

PLAN = RunPlan(clients=2, ops=2, ttl=1.0)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def session(
    tmp_path_factory: pytest.TempPathFactory, postgres_cluster: LocalCluster, s3_cluster: LocalCluster
) -> AsyncIterator[LabSession]:
    urls = {"postgres": postgres_cluster.postgres_dsn}
    workdir = tmp_path_factory.mktemp("lab-proxy")
    async with LabSession.open(workdir, token_urls=urls, s3=s3_cluster.s3) as opened:
        yield opened


async def stored(store: dict[str, str], spec: RunSpec) -> Held:
    """What SeaweedFS holds under the run's counter, found and read by the test's own client."""
    async with direct_client(store) as s3:
        listed = await s3.list_objects_v2(Bucket=store["bucket"], Prefix=f"lab-{spec.name}-")
        keys = [item["Key"] for item in listed.get("Contents", []) if item["Key"].endswith("/counter")]
        assert len(keys) == 1, keys  # one counter per run, under the run's fresh prefix
        found = await held(s3, store["bucket"], keys[0])
    assert found is not None
    return found


async def run(
    session: LabSession, store: str, s3: dict[str, str], scenario: str = PROXY_DELAY
) -> tuple[History, Verdict, Held]:
    spec = RunSpec(scenario, "fenced", "redlock", "postgres", seed=5, store=store)
    history = await session.run(spec, PLAN)
    assert (history.meta.scenario, history.meta.store) == (scenario, store)
    verdict = check(history)
    assert verdict.safe is expected_safe(spec)
    found = await stored(s3, spec)
    assert int(found.data) == history.final  # the checker's final value is the store's own bytes
    return history, verdict, found


def faults(history: History) -> list[str]:
    return [e.detail for e in history.events if e.kind == "fault"]


def holders_first_write(history: History) -> tuple[int, str]:
    """The held write: the holder's first lease's write, its token and outcome."""
    write = next(e for e in history.events if e.lease == "c1/1" and e.kind == "write" and e.outcome != "sent")
    assert write.token is not None
    return write.token, write.outcome


@ON_THE_SESSION
async def test_the_conditional_proxy_refuses_the_held_write_at_the_store(
    session: LabSession, s3_cluster: LocalCluster
) -> None:
    history, verdict, found = await run(session, "s3", s3_cluster.s3)
    assert faults(history) == ["replica A's path to the store holds it", "held write delivered to the store"]
    assert_the_fence_refused(verdict)
    assert holders_first_write(history)[1] == "refused"
    accepted = [e for e in history.events if e.kind == "write" and e.accepted]
    assert found.token == max(e.token for e in accepted if e.token is not None)  # the newest write holds


@ON_THE_SESSION
async def test_the_unconditional_proxy_loses_an_update_at_the_store(
    session: LabSession, s3_cluster: LocalCluster
) -> None:
    history, verdict, found = await run(session, UNCONDITIONAL, s3_cluster.s3)
    assert faults(history) == ["replica A's path to the store holds it", "held write delivered to the store"]
    assert not verdict.safe
    assert verdict.lost_updates >= 1, verdict
    acknowledged = sum(1 for e in history.events if e.kind == "write" and e.accepted)
    assert int(found.data) < acknowledged  # the store itself holds fewer increments than were answered 2xx
    token, outcome = holders_first_write(history)
    assert outcome == "ok"  # answered 201 by replica A, no error anywhere
    later = [e.token for e in history.events if e.kind == "write" and e.accepted and e.token is not None]
    assert max(later) > token  # a newer lease wrote, and the held write then landed over it


@pytest.mark.parametrize("store", PROXY_STORES)
@ON_THE_SESSION
async def test_a_held_write_after_a_newer_delete_recreates_the_key_only_without_the_stores_check(
    session: LabSession, s3_cluster: LocalCluster, store: str
) -> None:
    history, verdict, _ = await run(session, store, s3_cluster.s3, scenario=PROXY_DELETE)
    noted = faults(history)
    assert noted[0] == "replica A's path to the store holds it"
    assert noted[1].startswith("deleted with token ")  # the newer lease's delete, before the held write
    assert noted[2:] == ["held write delivered to the store", f"recreated with {noted[1].split(' with ')[1]}"]
    token, outcome = holders_first_write(history)
    assert int(noted[1].rsplit(" ", 1)[1]) > token
    if store == UNCONDITIONAL:  # the held write recreated the deleted key: 201, and an update lost
        assert outcome == "ok"
        assert not verdict.safe
        assert verdict.lost_updates >= 1, verdict
    else:  # the tombstone carries the deleting token: the held write is refused, nothing recreated
        assert outcome == "refused"
        assert_the_fence_refused(verdict)


def test_lab_run_of_a_proxy_scenario_runs_the_s3_stores_unless_told_otherwise() -> None:
    assert run_store(PROXY_DELAY, None) == run_store(PROXY_DELETE, None) == "s3"
    assert run_store("pause", None) == "gateway"
    assert run_store(PROXY_DELAY, "gateway") == "gateway"  # asked for: plan_runs refuses it in one line


def test_proxy_delay_runs_on_the_s3_stores_only_in_fenced_mode() -> None:
    for store in PROXY_STORES:
        modes: list[Mode] = ["lock-only", "fenced"]
        specs = plan_runs([PROXY_DELAY], modes, design="redlock", tokens="sqlite", seeds=[1], store=store)
        assert [(spec.mode, spec.store) for spec in specs] == [("fenced", store)]
        assert servers_for(specs) == {"sqlite", "postgres", "s3"}
        assert store_inapplicable(store, "pause") is not None
    for store in ("gateway", "sql", "sql-trigger"):
        with pytest.raises(LabArgumentError, match="s3 and s3-unconditional"):
            plan_runs([PROXY_DELAY], ["fenced"], design="redlock", tokens="sqlite", seeds=[1], store=store)
