"""The deployment's topology on loopback: 5 Redis, a 3-node ZooKeeper ensemble, PostgreSQL,
two `fencegate serve` replicas behind HAProxy, as `fencegate cluster up --gateways 2` starts it.

One topology serves the module (it takes seconds to start); a test that stops a
node starts it again before it returns.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from fencegate.cli import main
from fencegate.lab.checker import check
from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.cluster.loadcheck import Ack, Ledger, drive, verify
from fencegate.lab.cluster.servers import HOST
from fencegate.lab.deployments import Mode
from fencegate.lab.scenarios import RunPlan
from fencegate.lab.session import LabSession, RunSpec, expected_safe
from lockclient import GatewayClient, Redlock, ZooKeeperTokens
from tests.waiting import eventually

SPEC = ClusterSpec(redis=5, zookeeper_ensemble=3, postgres=True, gateways=2)
COMPOSE = Path(__file__).resolve().parents[2] / "compose" / "docker-compose.yml"
DEADLINE = 60.0  # seconds for a condition under load on a shared 2-core machine
PUT_OK = (('method="PUT"', 'status="200"'), ('method="PUT"', 'status="201"'))


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster.running(SPEC, tmp_path_factory.mktemp("deploy")) as cluster:
        yield cluster


def _zookeeper_mode(cluster: LocalCluster, name: str) -> str:
    with socket.create_connection((HOST, cluster.nodes[name].port), timeout=2) as sock:
        sock.sendall(b"srvr")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    found = re.search(rb"Mode: (\w+)", reply)
    return found.group(1).decode() if found else "unknown"


async def _accepted_puts(url: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as resp:
        body = await resp.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith("fencegate_requests_total{") and any(all(p in line for p in ok) for ok in PUT_OK)
    )


async def _wait_for(condition: Callable[[], bool]) -> None:
    """Poll a counter moved by the load's tasks, under a deadline (there is no event to wait on)."""
    await eventually(condition, within=DEADLINE)


def test_endpoints_name_the_load_balancer_and_both_gateways(topology: LocalCluster) -> None:
    endpoints = topology.endpoints()
    assert endpoints["load_balancer"] == topology.nodes["haproxy-0"].url
    assert endpoints["gateways"] == [topology.nodes["gateway-0"].url, topology.nodes["gateway-1"].url]
    assert endpoints["pids"]["haproxy-0"] == topology.nodes["haproxy-0"].pid


def test_gateways_are_configured_with_the_compose_variables(topology: LocalCluster) -> None:
    compose_env = yaml.safe_load(COMPOSE.read_text())["services"]["gateway-1"]["environment"]
    for name in ("gateway-0", "gateway-1"):
        env = topology.nodes[name].env
        assert set(env) - {"FENCEGATE_DATA_DIR"} <= set(compose_env)
        assert env["FENCEGATE_STORAGE"] == topology.postgres_dsn
        assert env["FENCEGATE_TOKENS"] == "zookeeper://" + topology.zookeeper
        assert env["FENCEGATE_PORT"] == str(topology.nodes[name].port)
        assert topology.nodes[name].argv[-1] == "serve"  # no flags: the environment is the config


async def test_cluster_check_load_through_haproxy_is_clean_and_reaches_both_gateways(
    topology: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    before = [await _accepted_puts(url) for url in topology.gateway_urls]
    argv = ["--log-level", "WARNING", "cluster", "check", "--dir", str(topology.dir), "--seconds", "4"]
    code = await asyncio.to_thread(main, argv)
    report = json.loads(capsys.readouterr().out)
    assert report["problems"] == []
    assert report["acknowledged"] > 0
    assert code == 0
    after = [await _accepted_puts(url) for url in topology.gateway_urls]
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
    assert sum(after) - sum(before) >= report["acknowledged"]


async def test_zookeeper_leader_stopped_mid_run_tokens_keep_increasing(topology: LocalCluster) -> None:
    members = [n for n, node in topology.nodes.items() if node.kind == "zookeeper"]
    leader = next(n for n in members if _zookeeper_mode(topology, n) == "leader")
    resources = [f"zk-stop/r{i}" for i in range(4)]
    ledger, stop = Ledger(), asyncio.Event()
    tokens = ZooKeeperTokens(topology.zookeeper)
    try:
        async with (
            Redlock(topology.redis_urls, tokens=tokens) as locker,
            GatewayClient(topology.load_balancer) as gateway,
        ):
            load = asyncio.create_task(
                drive(
                    gateway=gateway, locker=locker, resources=resources, workers=6, stop=stop, ledger=ledger
                )
            )
            try:
                await _wait_for(lambda: len(ledger.acks) >= 10)
                epoch = max(a.token for a in ledger.acks) >> 32  # a zxid's high 32 bits: the leader's epoch
                await asyncio.to_thread(topology.stop, leader)
                await _wait_for(lambda: sum(a.token >> 32 > epoch for a in ledger.acks) >= 10)
            finally:
                stop.set()
                await load
            problems = await verify(gateway, ledger, resources)
    finally:
        await asyncio.to_thread(topology.restart, leader)
    assert problems == []  # per resource, in commit order, tokens never went back across the election
    assert sum(a.token >> 32 > epoch for a in ledger.acks) >= 10


async def test_writes_through_the_load_balancer_go_on_while_a_gateway_is_stopped(
    topology: LocalCluster,
) -> None:
    await asyncio.to_thread(topology.stop, "gateway-1")
    try:
        async with (
            GatewayClient(topology.load_balancer) as gateway,
            ZooKeeperTokens(topology.zookeeper) as zk,
        ):
            for _ in range(10):  # round robin would send every other request to the stopped replica
                token = await zk.next_token("lb-failover/a")
                info = await gateway.put("lb-failover/a", b"x", token=token, resource="lb-failover/a")
                assert info.token == token
            assert await gateway.fence("lb-failover/a") == token
    finally:
        await asyncio.to_thread(topology.restart, "gateway-1")


async def test_the_checker_reports_a_lost_write_and_a_token_that_went_back(topology: LocalCluster) -> None:
    """The clean verdicts above mean something only if `verify` can fail."""
    resource = "checker-self-test/a"
    async with GatewayClient(topology.load_balancer) as gateway, ZooKeeperTokens(topology.zookeeper) as zk:
        low, high = await zk.next_token(resource), await zk.next_token(resource)
        await gateway.put(resource, b"one", token=low, resource=resource)
        await gateway.put(resource, b"two", token=high, resource=resource)
        went_back = Ledger(acks=[Ack(resource, high, 1, b"one"), Ack(resource, low, 2, b"two")])
        lost = Ledger(acks=[Ack(resource, high, 2, b"two"), Ack(resource, high, 3, b"three")])
        assert any("went back" in p for p in await verify(gateway, went_back, [resource]))
        assert any("v3 lost" in p for p in await verify(gateway, lost, [resource]))


async def test_a_bound_read_through_one_member_covers_a_token_issued_through_another(
    topology: LocalCluster,
) -> None:
    """ZooKeeper reads are not linearizable: a follower may lag the leader. The gateways' guard
    reads the bound through whichever member its session has, so the bound must be synced
    first, or a token just issued elsewhere is refused as 422 from the future."""
    first, second = [n.address for n in topology.nodes.values() if n.kind == "zookeeper"][:2]
    async with ZooKeeperTokens(first) as issuer, ZooKeeperTokens(second) as reader:
        for i in range(100):
            resource = f"zk-sync/r{i % 4}"
            token = await issuer.next_token(resource)
            assert await reader.upper_bound(resource) >= token


@pytest.mark.parametrize("mode", ["fenced", "fence-only"])
async def test_the_labs_pause_scenario_through_the_load_balancer(
    topology: LocalCluster, tmp_path: Path, mode: Mode
) -> None:
    """The lab's `pause` on the deployment's storage tier: two gateways on PostgreSQL behind HAProxy,
    tokens from the ZooKeeper ensemble (the lab brings its own Redis masters, which it faults).

    Only the modes that draw tokens: the deployment's gateways guard against tokens from the future,
    so redis-only's constant token is refused there (422), as it should be.
    """
    tokens = {"zookeeper": f"zookeeper://{topology.zookeeper}"}
    async with LabSession.open(tmp_path, token_urls=tokens, gateway_url=topology.load_balancer) as session:
        assert session.gateway is None  # nothing of the lab's own stands in for the deployment
        spec = RunSpec("pause", mode, "redlock", "zookeeper", seed=2)
        verdict = check(await session.run(spec, RunPlan(clients=2, ops=2, ttl=1.0)))
    assert verdict.safe is expected_safe(spec)
    assert (verdict.lost_updates, verdict.interleaved_leases) == (0, 0)
    assert verdict.refused >= 1  # the paused holder's late write, refused by whichever replica got it
