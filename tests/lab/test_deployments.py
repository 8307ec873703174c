"""What each mode and lock design builds in a client process, and how a comparison expands into runs."""

from __future__ import annotations

import pytest

from fencegate.lab.deployments import INCR, GatewayDeployment, Mode
from fencegate.lab.errors import LabArgumentError, LabError
from fencegate.lab.predictions import INAPPLICABLE
from fencegate.lab.session import RunSpec, expected_safe, one_node_note, plan_runs, servers_for

GATEWAY = ("127.0.0.1", 8099)
NODES = [f"redis://127.0.0.1:{port}" for port in range(7001, 7006)]


def deployment(
    mode: Mode, design: str = "redlock", tokens: str | None = "sqlite:////tmp/t.db"
) -> GatewayDeployment:
    return GatewayDeployment(mode=mode, design=design, gateway=GATEWAY, key="k", resource="r", tokens=tokens)


def test_lock_only_takes_a_lease_without_a_token_and_writes_unfenced() -> None:
    chosen = deployment("lock-only", tokens=None)
    assert chosen.lock_nodes == 5
    lock = chosen.lock(NODES, tokens="redis://127.0.0.1:7009")
    assert (lock.factory, lock.kwargs["tokens"]) == ("fencegate.lab.leases:redlock", None)
    store = chosen.store(GATEWAY)
    assert (store.factory, store.kwargs["fenced"], store.kwargs["url"]) == (
        "fencegate.lab.gateway_store:counter",
        False,
        "http://127.0.0.1:8099",
    )


def test_fenced_draws_tokens_from_the_source_and_the_incr_source_is_marked_unsafe() -> None:
    lock = deployment("fenced").lock(NODES, tokens="redis://127.0.0.1:7003")
    assert lock.kwargs == {"urls": NODES, "tokens": "sqlite:////tmp/t.db"}
    incr = deployment("fenced", tokens=INCR).lock(NODES, tokens="redis://127.0.0.1:7003")
    assert incr.kwargs["tokens"] == "redis://127.0.0.1:7003?unsafe=1"
    assert deployment("fenced").store(GATEWAY).kwargs["fenced"] is True


def test_fence_only_takes_no_lock() -> None:
    lock = deployment("fence-only").lock(NODES, tokens="redis://127.0.0.1:7003")
    assert lock == type(lock)("fencegate.lab.leases:token_only", {"tokens": "sqlite:////tmp/t.db"})


@pytest.mark.parametrize(("design", "lock_only", "fenced"), [
    ("single", "fencegate.lab.locks:SingleLock", "fencegate.lab.leases:tokened"),
    ("setnx-getset", "fencegate.lab.locks:SetnxGetsetLock", "fencegate.lab.leases:tokened"),
])  # fmt: skip
def test_the_lab_lock_designs_use_one_node(design: str, lock_only: str, fenced: str) -> None:
    assert deployment("lock-only", design, tokens=None).lock(NODES, tokens="").factory == lock_only
    chosen = deployment("fenced", design)
    assert chosen.lock_nodes == 1
    assert chosen.lock(NODES, tokens="").kwargs == {
        "design": design,
        "url": NODES[0],
        "tokens": "sqlite:////tmp/t.db",
    }


ETCD_URL = "etcd://127.0.0.1:2379,127.0.0.1:22379"


@pytest.mark.parametrize(("mode", "tokens"), [("lock-only", False), ("fenced", True)])
def test_the_etcd_design_uses_its_cluster_and_fences_with_its_own_revision(mode: Mode, tokens: bool) -> None:
    chosen = GatewayDeployment(
        mode=mode, design="etcd", gateway=GATEWAY, key="k", resource="r",
        tokens=None if mode == "lock-only" else ETCD_URL, lock_url=ETCD_URL,
    )  # fmt: skip
    assert chosen.lock_nodes == 0  # no redis node: the session's etcd cluster holds the lock
    lock = chosen.lock([], tokens="")
    assert (lock.factory, dict(lock.kwargs)) == (
        "fencegate.lab.etcd_lock:etcd_lock",
        {"url": ETCD_URL, "tokens": tokens},
    )
    with pytest.raises(LabError, match="the etcd lock design needs its cluster"):
        GatewayDeployment(mode=mode, design="etcd", gateway=GATEWAY, key="k", resource="r", tokens=ETCD_URL)


def test_the_etcd_design_runs_with_its_own_tokens_whatever_source_was_asked_for() -> None:
    runs = plan_runs(
        ["pause"], ["lock-only", "fenced", "fence-only"], design="etcd", tokens="postgres", seeds=[1]
    )
    assert [(r.mode, r.tokens) for r in runs] == [
        ("lock-only", None),
        ("fenced", "etcd"),
        ("fence-only", "etcd"),
    ]
    assert servers_for(runs) == {"etcd"}
    assert servers_for(plan_runs(["pause"], ["lock-only"], design="etcd", tokens="sqlite", seeds=[1])) == {
        "etcd"
    }


@pytest.mark.parametrize(
    "scenario", ["delay", "clock-jump", "restart", "restart-delayed", "failover", "token-regress"]
)
def test_a_scenario_that_cannot_apply_to_etcd_is_refused_with_the_reason(scenario: str) -> None:
    with pytest.raises(LabArgumentError, match=f"--scenario {scenario} does not apply to --lock etcd: it "):
        plan_runs(["pause", scenario], ["lock-only"], design="etcd", tokens="sqlite", seeds=[1])
    assert set(INAPPLICABLE) == {"etcd"}  # every scenario applies to every redis design
    assert len(plan_runs([scenario], ["fenced"], design="single", tokens="sqlite", seeds=[1])) >= 1


def test_bad_deployments_are_refused_with_the_fix() -> None:
    with pytest.raises(LabError, match="unknown lock design 'zk'"):
        deployment("fenced", "zk")
    with pytest.raises(LabError, match="fenced mode draws tokens"):
        deployment("fenced", tokens=None)


def test_token_regress_runs_fenced_with_incr_next_to_a_source_that_does_not_go_back() -> None:
    modes: list[Mode] = ["lock-only", "fenced"]
    runs = plan_runs(["pause", "token-regress"], modes, design="redlock", tokens="postgres", seeds=[1, 2])
    assert [(r.scenario, r.mode, r.tokens, r.seed) for r in runs] == [
        ("pause", "lock-only", None, 1),
        ("pause", "fenced", "postgres", 1),
        ("token-regress", "fenced", "incr", 1),
        ("token-regress", "fenced", "postgres", 1),
        ("pause", "lock-only", None, 2),
        ("pause", "fenced", "postgres", 2),
        ("token-regress", "fenced", "incr", 2),
        ("token-regress", "fenced", "postgres", 2),
    ]
    regress = plan_runs(["token-regress"], ["fenced"], design="redlock", tokens=INCR, seeds=[1])
    assert [r.tokens for r in regress] == [INCR, "sqlite"]
    with pytest.raises(LabError, match="unknown scenario 'nap'"):
        plan_runs(["nap"], ["fenced"], design="redlock", tokens="sqlite", seeds=[1])


@pytest.mark.parametrize(("spec", "safe"), [
    (RunSpec("pause", "lock-only", "redlock", None, 1), False),
    (RunSpec("pause", "fenced", "redlock", "sqlite", 1), True),
    (RunSpec("restart-delayed", "lock-only", "redlock", None, 1), True),
    (RunSpec("clock-jump", "lock-only", "setnx-getset", None, 1), True),
    (RunSpec("clock-skew", "lock-only", "setnx-getset", None, 1), False),
    (RunSpec("clock-skew", "fenced", "setnx-getset", "sqlite", 1), True),
    (RunSpec("clock-skew", "lock-only", "redlock", None, 1), True),
    (RunSpec("clock-skew", "lock-only", "single", None, 1), True),
    (RunSpec("token-regress", "fenced", "redlock", INCR, 1), False),
    (RunSpec("token-regress", "fenced", "redlock", "zookeeper", 1), True),
    (RunSpec("restart", "fence-only", "redlock", INCR, 1), True),
    (RunSpec("pause", "lock-only", "etcd", None, 1), False),
    (RunSpec("pause", "fenced", "etcd", "etcd", 1), True),
    (RunSpec("pause", "fence-only", "etcd", "etcd", 1), True),
    (RunSpec("none", "lock-only", "etcd", None, 1), True),
    (RunSpec("clock-skew", "lock-only", "etcd", None, 1), True),
])  # fmt: skip
def test_the_predicted_verdicts(spec: RunSpec, safe: bool) -> None:
    assert expected_safe(spec) is safe


def test_a_five_node_scenario_says_so_on_a_one_node_lock() -> None:
    note = one_node_note(["pause", "restart", "clock-jump"], "single")
    assert note is not None
    assert note.startswith("restart, clock-jump need 5 lock nodes")
    assert "--lock single has one node" in note
    assert one_node_note(["restart"], "redlock") is None
    assert one_node_note(["pause", "delay"], "single") is None
