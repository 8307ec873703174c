"""The cluster helper starts real servers, faults them, and leaves nothing behind."""

from __future__ import annotations

import base64
import json
import os
import pwd
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fencegate.lab.cluster import ClusterSpec, LocalCluster, MissingServerError
from fencegate.lab.cluster.probes import probe
from lockclient import TokenSourceError, ZooKeeperTokens, open_token_source
from tests.urls import without_query
from tests.waiting import eventually_sync


def _alive(pid: int | None) -> bool:
    assert pid is not None
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _redis(url: str, *command: str) -> bytes:
    host, port = url.removeprefix("redis://").split(":")
    wire = f"*{len(command)}\r\n" + "".join(f"${len(c)}\r\n{c}\r\n" for c in command)
    with socket.create_connection((host, int(port)), timeout=2) as sock:
        sock.sendall(wire.encode())
        return sock.recv(4096)


def test_every_kind_starts_answers_and_stops_by_pid(tmp_path: Path) -> None:
    spec = ClusterSpec(redis=3, zookeeper=True, postgres=True)
    with LocalCluster.running(spec, tmp_path / "state") as cluster:
        pids = [node.pid for node in cluster.nodes.values()]
        assert len(pids) == 5
        assert all(_alive(pid) for pid in pids)
        assert all(probe(node) for node in cluster.nodes.values())
        recorded = json.loads((tmp_path / "state" / "cluster.json").read_text())
        assert sorted(n["pid"] for n in recorded["nodes"]) == sorted(pids)  # type: ignore[type-var]
    assert not any(_alive(pid) for pid in pids)
    assert not (tmp_path / "state").exists()


def test_two_clusters_side_by_side_get_distinct_ports(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    first = cluster_factory(ClusterSpec(redis=3))
    second = cluster_factory(ClusterSpec(redis=3))
    ports = [n.port for c in (first, second) for n in c.nodes.values()]
    assert len(set(ports)) == 6


def test_pause_hangs_a_node_and_resume_brings_it_back(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    cluster = cluster_factory(ClusterSpec(redis=1))
    node = cluster.nodes["redis-0"]
    cluster.pause("redis-0")
    assert not probe(node)
    assert cluster.is_running("redis-0")
    cluster.resume("redis-0")
    assert probe(node)


def test_kill_and_restart_without_persistence_loses_keys(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    cluster = cluster_factory(ClusterSpec(redis=1))
    url = cluster.redis_urls[0]
    old_pid = cluster.nodes["redis-0"].pid
    assert _redis(url, "SET", "k", "v") == b"+OK\r\n"
    cluster.kill("redis-0")
    assert not _alive(old_pid)
    cluster.restart("redis-0")
    assert cluster.redis_urls[0] == url
    assert _redis(url, "GET", "k") == b"$-1\r\n"


def test_aof_keeps_keys_across_a_crash(cluster_factory: Callable[[ClusterSpec], LocalCluster]) -> None:
    cluster = cluster_factory(ClusterSpec(redis=1, aof=True))
    url = cluster.redis_urls[0]
    assert _redis(url, "SET", "k", "v") == b"+OK\r\n"
    cluster.kill("redis-0")
    cluster.restart("redis-0")
    assert _redis(url, "GET", "k") == b"$1\r\nv\r\n"


def test_missing_binary_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    cluster = LocalCluster(tmp_path / "state")
    with pytest.raises(MissingServerError, match="apt-get install redis-server"):
        cluster.add_redis()
    monkeypatch.setenv("FENCEGATE_PG_BINDIR", str(tmp_path))
    with pytest.raises(MissingServerError, match="apt-get install postgresql"):
        cluster.add_postgres()
    assert cluster.nodes == {}


def test_cli_up_then_down_leaves_no_process(tmp_path: Path) -> None:
    state = tmp_path / "state"
    cli = [sys.executable, "-m", "fencegate.cli", "cluster"]
    up = subprocess.run([*cli, "up", "--redis", "2", "--dir", str(state)],
                        capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    endpoints = json.loads(up.stdout)
    pids = list(endpoints["pids"].values())
    assert len(endpoints["redis"]) == 2
    assert all(_alive(pid) for pid in pids)
    down = subprocess.run([*cli, "down", "--dir", str(state)],
                          capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    assert sorted(json.loads(down.stdout)["stopped"]) == ["redis-0", "redis-1"]
    assert not any(_alive(pid) for pid in pids)
    assert not state.exists()
    assert os.path.exists(tmp_path)


def _mode(node_port: int) -> str:
    with socket.create_connection(("127.0.0.1", node_port), timeout=2) as sock:
        sock.sendall(b"srvr")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    for line in reply.decode().splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ")
    return ""


def test_zookeeper_ensemble_elects_one_leader_and_survives_a_member_stop(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    cluster = cluster_factory(ClusterSpec(redis=0, zookeeper_ensemble=3))
    members = [n for n in cluster.nodes.values() if n.kind == "zookeeper"]
    assert cluster.zookeeper == ",".join(n.address for n in members)
    modes = sorted(_mode(n.port) for n in members)
    assert modes == ["follower", "follower", "leader"]
    follower = next(n for n in members if _mode(n.port) == "follower")
    cluster.stop(follower.name)
    assert not cluster.is_running(follower.name)
    assert all(probe(n) for n in members if n is not follower)


async def test_pausing_postgres_hangs_open_connections_too(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    import asyncio

    import asyncpg

    cluster = cluster_factory(ClusterSpec(redis=0, postgres=True))
    conn = await asyncpg.connect(cluster.postgres_dsn)
    try:
        assert await conn.fetchval("SELECT 1") == 1
        cluster.pause("postgres-0")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(conn.fetchval("SELECT 2"), 0.5)
        cluster.resume("postgres-0")
    finally:
        cluster.resume("postgres-0")
        conn.terminate()
    conn = await asyncpg.connect(cluster.postgres_dsn)
    assert await conn.fetchval("SELECT 3") == 3
    await conn.close()


def _etcd(node_port: int, op: str, **body: str) -> dict[str, Any]:
    """One call to etcd's v3 JSON gateway (keys and values are base64 there)."""
    data = json.dumps({k: base64.b64encode(v.encode()).decode() for k, v in body.items()}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{node_port}/v3/kv/{op}", data=data, method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 (an http URL built here)
        reply: dict[str, Any] = json.loads(response.read())
    return reply


def test_etcd_cluster_elects_a_leader_survives_its_kill_and_restarts_with_its_data(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    cluster = cluster_factory(ClusterSpec(redis=0, etcd=3))
    members = [n for n in cluster.nodes.values() if n.kind == "etcd"]
    assert [n.name for n in members] == ["etcd-0", "etcd-1", "etcd-2"]
    assert cluster.etcd == "etcd://" + ",".join(f"127.0.0.1:{n.port}" for n in members)
    assert cluster.endpoints()["etcd"] == cluster.etcd
    written = int(_etcd(members[0].port, "put", key="k", value="v")["header"]["revision"])

    leader = cluster.etcd_leader()
    cluster.kill(leader)
    assert not cluster.is_running(leader)
    survivors = [n for n in members if n.name != leader]
    eventually_sync(lambda: all(probe(n) for n in survivors), within=30, what="a new leader")
    assert cluster.etcd_leader() != leader
    cluster.restart(leader)
    assert probe(cluster.nodes[leader])

    cluster.restart_all("etcd")  # every member killed with -9 and started again on its data
    assert all(probe(n) for n in members)
    kv = _etcd(members[2].port, "range", key="k")["kvs"][0]
    assert base64.b64decode(kv["value"]) == b"v"
    assert int(kv["mod_revision"]) == written


def test_cli_up_with_etcd_tls_serves_https_only(tmp_path: Path) -> None:
    """`--etcd-tls mutual` implies one member; its URL carries what a client needs; plaintext gets nothing,
    and the helper's own probes (health, leader) speak TLS with the client certificate."""
    state = tmp_path / "state"
    cli = [sys.executable, "-m", "fencegate.cli", "cluster"]
    up = subprocess.run([*cli, "up", "--redis", "0", "--etcd-tls", "mutual", "--dir", str(state)],
                        capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    cluster = LocalCluster.attach(state)
    try:
        (node,) = cluster.nodes.values()
        tls = node.tls
        assert json.loads(up.stdout)["etcd"] == cluster.etcd == f"etcd://127.0.0.1:{node.port}" + node.query
        assert tls == {"use_ssl": "true", "ca": str(state / "tls" / "ca.pem")} | {
            "certfile": str(state / "tls" / "fencegate-client.crt"),
            "keyfile": str(state / "tls" / "fencegate-client.key"),
        }
        with pytest.raises(OSError):  # noqa: PT011 (the connection is closed or reset, either will do)
            _etcd(node.port, "range", key="k")
        assert cluster.etcd_leader() == node.name
        assert probe(node)
    finally:
        subprocess.run([*cli, "down", "--dir", str(state)], capture_output=True, check=True, timeout=120)


def test_cli_up_with_etcd_prints_its_url_and_down_stops_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    cli = [sys.executable, "-m", "fencegate.cli", "cluster"]
    up = subprocess.run([*cli, "up", "--redis", "0", "--etcd", "3", "--dir", str(state)],
                        capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    endpoints = json.loads(up.stdout)
    pids = list(endpoints["pids"].values())
    assert endpoints["etcd"].startswith("etcd://127.0.0.1:")
    assert len(endpoints["etcd"].split(",")) == 3
    assert len(pids) == 3
    assert all(_alive(pid) for pid in pids)
    subprocess.run([*cli, "down", "--dir", str(state)], capture_output=True, check=True, timeout=120)
    assert not any(_alive(pid) for pid in pids)


def test_tls_masters_speak_tls_only_to_the_acl_user_and_come_back_so_after_a_restart(tmp_path: Path) -> None:
    import redis

    with LocalCluster.running(ClusterSpec(redis=1, redis_tls=True), tmp_path / "state") as cluster:
        node = cluster.nodes["redis-0"]
        user, password = cluster.tls_login
        assert node.url.startswith(f"rediss://{user}:{password}@127.0.0.1:{node.port}?ssl_ca_certs=")
        try:
            plaintext = _redis(f"redis://127.0.0.1:{node.port}", "PING")
        except OSError:  # reset: the port speaks TLS only
            plaintext = b""
        assert b"PONG" not in plaintext
        cluster.kill("redis-0")
        cluster.restart("redis-0")  # the same port, the same certificates and user
        client = redis.Redis.from_url(node.url)
        try:
            assert client.acl_whoami() == user
            assert client.config_get("port") == {"port": "0"}
        finally:
            client.close()
        anonymous = redis.Redis.from_url(node.url.replace(f"{user}:{password}@", ""))
        try:
            with pytest.raises(redis.AuthenticationError):  # the default user is off
                anonymous.ping()
        finally:
            anonymous.close()
        attached = LocalCluster.attach(tmp_path / "state")
        assert attached.redis_urls == cluster.redis_urls


async def test_cli_up_with_tls_reports_urls_that_work_and_servers_refuse_plaintext(tmp_path: Path) -> None:
    """`server` mode: TLS without client certificates; the reported URLs carry what a client needs."""
    import asyncio

    import asyncpg

    state = tmp_path / "state"
    cli = [sys.executable, "-m", "fencegate.cli", "cluster"]
    argv = [*cli, "up", "--redis", "0", "--postgres-tls", "server", "--zookeeper-tls", "server", "--dir"]
    up = await asyncio.to_thread(
        subprocess.run, [*argv, str(state)], capture_output=True, text=True, check=True, timeout=180
    )
    endpoints = json.loads(up.stdout)
    pids = list(endpoints["pids"].values())
    try:
        ca = str(state.resolve() / "tls" / "ca.pem")
        postgres, zookeeper = endpoints["postgres"], endpoints["zookeeper"]
        cluster = LocalCluster.attach(state)
        assert postgres.endswith(f"/postgres?sslmode=verify-full&sslrootcert={ca}")
        assert zookeeper == f"zookeeper://{cluster.zookeeper}?use_ssl=true&ca={ca}"
        for url in (postgres, zookeeper):
            source = open_token_source(url)
            try:
                assert await source.next_token("cli-tls") > 0
            finally:
                await source.aclose()
        with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="no encryption"):
            await asyncpg.connect(without_query(postgres), ssl=False)
        async with ZooKeeperTokens(cluster.zookeeper, connect_timeout=1.0) as plaintext:
            with pytest.raises(TokenSourceError, match="within connect_timeout"):
                await plaintext.next_token("cli-tls")
        key = Path(cluster.nodes["postgres-0"].data_dir) / "tls" / "server.key"
        assert key.stat().st_mode & 0o777 == 0o600  # PostgreSQL refuses a key others can read
        if os.geteuid() == 0:  # PostgreSQL runs as `postgres` and insists on owning its key
            assert key.stat().st_uid == pwd.getpwnam("postgres").pw_uid
    finally:
        await asyncio.to_thread(
            subprocess.run, [*cli, "down", "--dir", str(state)], capture_output=True, check=True, timeout=120
        )
    assert not any(_alive(pid) for pid in pids)


def test_faults_on_several_nodes_at_once_keep_each_node_and_the_state_file_whole(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    """Lab faults drive the helper from threads (`asyncio.to_thread`), several nodes at once: every
    kill and restart must stay recorded, in memory and in the state file `cluster down` reads."""
    cluster = cluster_factory(ClusterSpec(redis=6))
    errors: list[BaseException] = []

    def crash_and_restart(name: str) -> None:
        try:
            for _ in range(40):
                cluster.kill(name)
                cluster.restart(name)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=crash_and_restart, args=(name,)) for name in cluster.nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    saved = {
        node["name"]: node["pid"] for node in json.loads((cluster.dir / "cluster.json").read_text())["nodes"]
    }
    for name, node in cluster.nodes.items():
        assert cluster.is_running(name)
        assert saved[name] == node.pid
