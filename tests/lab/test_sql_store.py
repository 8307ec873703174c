"""The lab's counter in a user table on real PostgreSQL: what each sql row predicts, and the table itself.

One lab session (its gateway unused by these rows) over the suite's shared
PostgreSQL, which holds both the user's table and the tokens. Each run is
`pause`, shortened: the holder is SIGSTOPped after its read and resumed once
the challenger wrote, so its write reaches the table after a newer lease's.
The verdicts are checked against what the table finally holds, read here
with a query of our own, not only against what the clients were told.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy import text

from fencegate.cli import main
from fencegate.lab.checker import Verdict, check
from fencegate.lab.cluster import LocalCluster
from fencegate.lab.deployments import MODES, Locks, Mode
from fencegate.lab.errors import LabArgumentError
from fencegate.lab.history import History, Meta
from fencegate.lab.report import RunResult, summary, table
from fencegate.lab.scenarios import SCENARIOS, RunPlan, run_scenario
from fencegate.lab.session import LabSession, RunSpec, expected_safe, plan_runs, servers_for
from fencegate.lab.sql_deployment import STORES, TRIGGER, SqlDeployment
from fencegate.lab.sql_store import TRIGGER_TABLE, open_engine
from lockclient.sql import uninstall_statements
from tests.lab.histories import paused_holder
from tests.lab.verdicts import assert_the_fence_refused

ON_THE_SESSION = pytest.mark.asyncio(loop_scope="module")  # the runs share the module's session

PLAN = RunPlan(clients=2, ops=2, ttl=1.0)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def session(
    tmp_path_factory: pytest.TempPathFactory, postgres_cluster: LocalCluster
) -> AsyncIterator[LabSession]:
    urls = {"postgres": postgres_cluster.postgres_dsn}
    async with LabSession.open(tmp_path_factory.mktemp("lab-sql"), token_urls=urls) as opened:
        yield opened


async def table_row(url: str, store: str, spec: RunSpec) -> tuple[int, int]:
    """(value, version) of the run's row, read from the user's table by a query of the test's own."""
    engine = open_engine(url)
    try:
        async with engine.connect() as conn:
            query = text(f"SELECT value, version FROM {STORES[store][0]} WHERE resource LIKE :run")  # noqa: S608
            rows = (await conn.execute(query, {"run": f"lab-{spec.name}-%"})).all()
    finally:
        await engine.dispose()
    assert len(rows) == 1, rows  # one row per run, keyed by the run's fresh resource
    return int(rows[0][0]), int(rows[0][1])


async def run(
    session: LabSession, mode: Mode, store: str, url: str, *, scenario: str = "pause"
) -> tuple[History, Verdict]:
    spec = RunSpec(
        scenario, mode, "redlock", None if mode == "lock-only" else "postgres", seed=3, store=store
    )
    history = await session.run(spec, PLAN)
    assert (history.meta.scenario, history.meta.mode, history.meta.store) == (scenario, mode, store)
    verdict = check(history)
    assert verdict.safe is expected_safe(spec)
    value, version = await table_row(url, store, spec)
    assert value == history.final  # the checker's final value is the table's
    assert version == sum(1 for e in history.events if e.kind == "write" and e.accepted)
    return history, verdict


@ON_THE_SESSION
async def test_lock_only_on_a_user_table_loses_the_update(
    session: LabSession, postgres_cluster: LocalCluster
) -> None:
    """A plain UPDATE after a lease: the paused holder's write lands after the newer one, in the table."""
    history, verdict = await run(session, "lock-only", "sql", postgres_cluster.postgres_dsn)
    assert verdict.lost_updates >= 1
    assert verdict.interleaved_leases >= 1
    assert verdict.zombie_requests >= 1  # the holder wrote after its lease ended
    assert verdict.refused == 0  # nothing in the table checks a lease
    assert history.final is not None
    assert history.final < verdict.acknowledged


@ON_THE_SESSION
async def test_the_call_in_each_transaction_refuses_the_paused_holders_write(
    session: LabSession, postgres_cluster: LocalCluster
) -> None:
    history, verdict = await run(session, "fenced", "sql", postgres_cluster.postgres_dsn)
    assert_the_fence_refused(verdict)
    (refused,) = [e for e in history.events if e.kind == "write" and e.outcome == "refused"]
    assert refused.client == "c1"  # the holder that was paused, under the older token
    assert refused.detail.startswith(f"stale token {refused.token} < ")


@ON_THE_SESSION
async def test_the_trigger_refuses_the_paused_holders_write_though_no_client_calls_anything(
    session: LabSession, postgres_cluster: LocalCluster
) -> None:
    history, verdict = await run(session, "fenced", TRIGGER, postgres_cluster.postgres_dsn)
    assert_the_fence_refused(verdict)
    (refused,) = [e for e in history.events if e.kind == "write" and e.outcome == "refused"]
    assert refused.client == "c1"
    assert f"token {refused.token} is below the mark" in refused.detail  # the trigger's own message
    assert not any(e.outcome == "refused" for e in history.events if e.kind == "read")  # reads are plain


@ON_THE_SESSION
async def test_the_same_clients_without_the_trigger_lose_the_update(
    postgres_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The control: the trigger's clients against its table with the trigger dropped are UNSAFE."""
    url = postgres_cluster.postgres_dsn
    locks = Locks("fenced", "redlock", f"sqlite:///{tmp_path / 'tokens.db'}")
    deployment = SqlDeployment(locks, TRIGGER, url, resource="lab-control-no-trigger")
    await deployment.seed()  # installs the trigger, as every run does
    engine = open_engine(url)
    try:
        async with engine.begin() as conn:
            for statement in uninstall_statements("postgresql", table=TRIGGER_TABLE):
                await conn.exec_driver_sql(statement)
    finally:
        await engine.dispose()
    plan = replace(PLAN, resource=deployment.resource)
    meta = Meta("pause", "fenced", "redlock", 3, tokens="sqlite", store=TRIGGER)
    history = await run_scenario(SCENARIOS["pause"], deployment, plan=plan, meta=meta, workdir=tmp_path)
    verdict = check(history)
    assert verdict.lost_updates >= 1
    assert verdict.interleaved_leases >= 1
    assert verdict.refused == 0  # the token column is written, and nothing reads it
    assert history.final == await deployment.final()


@ON_THE_SESSION
async def test_the_fault_free_run_is_safe_on_the_table(
    session: LabSession, postgres_cluster: LocalCluster
) -> None:
    _, verdict = await run(session, "lock-only", "sql", postgres_cluster.postgres_dsn, scenario="none")
    assert (verdict.lost_updates, verdict.interleaved_leases, verdict.refused) == (0, 0, 0)
    assert verdict.acknowledged == PLAN.clients * PLAN.ops


def test_the_sql_rows_run_pause_and_none_and_need_postgresql() -> None:
    specs = plan_runs(["pause"], MODES, design="redlock", tokens="sqlite", seeds=[1], store="sql")
    assert [(s.mode, s.store) for s in specs] == [(mode, "sql") for mode in MODES]
    trigger = plan_runs(["pause"], MODES, design="redlock", tokens="sqlite", seeds=[1], store=TRIGGER)
    assert [s.mode for s in trigger] == ["fenced"]  # no lock-only (the sql store's), no fence-only
    assert "postgres" in servers_for(specs)
    assert (
        servers_for(plan_runs(["pause"], ["lock-only"], design="redlock", tokens="sqlite", seeds=[1]))
        == set()
    )
    with pytest.raises(LabArgumentError, match="--scenario restart has no row on the sql store"):
        plan_runs(["restart"], MODES, design="redlock", tokens="sqlite", seeds=[1], store="sql")


def test_lab_run_refuses_a_scenario_without_a_sql_row_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["lab", "run", "--scenario", "restart", "--store", "sql", "--workdir", str(tmp_path / "w")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "fencegate lab run: --scenario restart has no row on the sql store, which runs none, pause: the "
        "faults of a lock node hit the lock, whatever store is behind it, and the gateway's rows show them"
    ]
    assert not (tmp_path / "w").exists()  # refused before anything started


def test_lab_all_runs_the_sql_rows_under_pause_and_says_what_it_skips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["lab", "all", "--store", "sql", "--mode", "lock-only", "--clients", "2", "--ops", "1", "--json",
            "--report", str(tmp_path / "r.html")]  # fmt: skip
    assert main(argv) == 0  # lock-only on the table is UNSAFE under pause, as predicted
    captured = capsys.readouterr()
    (run,) = json.loads(captured.out)["runs"]
    assert (run["meta"]["scenario"], run["meta"]["store"], run["verdict"]["safe"]) == ("pause", "sql", False)
    assert "note: the sql store skips delay, clock-jump" in captured.err
    assert "[1/1] pause lock-only redlock sql - seed 1 ... UNSAFE, as predicted" in captured.err


def test_the_table_and_the_summary_name_the_store_once_a_run_is_on_a_user_table() -> None:
    gateway = RunResult.of(paused_holder(Meta("pause", "lock-only", "redlock", 1), fenced=False))
    sql_run = RunResult.of(paused_holder(Meta("pause", "lock-only", "redlock", 1, store="sql"), fenced=False))
    assert "store" not in table([gateway]).splitlines()[0].split()  # the gateway's rows read as before
    header, _, *rows = table([gateway, sql_run]).splitlines()
    assert header.split()[:5] == ["scenario", "mode", "lock", "store", "tokens"]
    assert [row.split()[3] for row in rows] == ["gateway", "sql"]
    summary_header, _, *grouped = summary([gateway, sql_run]).splitlines()
    assert summary_header.split()[3] == "store"
    assert [row.split()[3] for row in grouped] == ["gateway", "sql"]  # one group per store
