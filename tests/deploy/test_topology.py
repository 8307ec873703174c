"""Pure logic of the native topology: what each replica is given, and the CLI's options."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from fencegate.cli import build_parser, main
from fencegate.lab.cluster import ClusterError, LocalCluster, Node
from fencegate.lab.cluster.topology import gateway_backends, haproxy_config


def _node(name: str, kind: str, port: int) -> Node:
    return Node(name, kind, port, ["x"], "/nonexistent", "/nonexistent/log")


def test_replicas_share_the_postgres_and_draw_tokens_from_every_zookeeper_member(tmp_path: Path) -> None:
    nodes = [_node("zookeeper-0", "zookeeper", 2181), _node("zookeeper-1", "zookeeper", 2182),
             _node("postgres-0", "postgres", 5432)]  # fmt: skip
    storage, tokens = gateway_backends(tmp_path, nodes)
    assert storage == "postgresql://postgres@127.0.0.1:5432/postgres"
    assert tokens == "zookeeper://127.0.0.1:2181,127.0.0.1:2182"


def test_without_postgres_replicas_share_one_sqlite_file_and_its_tokens_come_from_nowhere(
    tmp_path: Path,
) -> None:
    storage, tokens = gateway_backends(tmp_path, [_node("redis-0", "redis", 6379)])
    assert storage == f"sqlite:///{tmp_path.resolve()}/gateway-data/fencegate.db"
    assert (tmp_path / "gateway-data").is_dir()
    assert tokens is None


def test_haproxy_balances_every_gateway_and_checks_readyz() -> None:
    config = haproxy_config(
        bind="127.0.0.1:9000", servers=[("gateway-0", "127.0.0.1:1"), ("gateway-1", "127.0.0.1:2")]
    )
    assert "bind 127.0.0.1:9000" in config
    assert "option httpchk GET /readyz" in config
    assert "server gateway-0 127.0.0.1:1 check" in config
    assert "server gateway-1 127.0.0.1:2 check" in config
    assert "resolvers" not in config  # loopback addresses never change
    assert "frontend stats" not in config


def test_cluster_up_accepts_gateways() -> None:
    args = build_parser().parse_args(
        ["cluster", "up", "--gateways", "2", "--zookeeper-ensemble", "3", "--postgres"]
    )
    assert (args.gateways, args.zookeeper_ensemble, args.postgres) == (2, 3, True)


def test_a_load_balancer_without_gateways_is_refused_before_anything_starts(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    with pytest.raises(ClusterError, match="at least 1 gateway"):
        cluster.add_gateways(0)
    assert cluster.nodes == {}


def test_cluster_up_and_down_by_cli_start_and_stop_gateways_and_haproxy_by_pid(tmp_path: Path) -> None:
    """The operator's path: `up` in one process, `down` in another, with nothing left running."""
    state = tmp_path / "deploy"
    fencegate = [sys.executable, "-m", "fencegate.cli", "--log-level", "WARNING", "cluster"]
    up = subprocess.run(
        [*fencegate, "up", "--redis", "1", "--gateways", "2", "--dir", str(state)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        endpoints = json.loads(up.stdout)
        pids = [endpoints["pids"][name] for name in ("gateway-0", "gateway-1", "haproxy-0")]
        assert endpoints["load_balancer"].startswith("http://127.0.0.1:")
        url = endpoints["load_balancer"] + "/readyz"
        with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - http URL from `up`
            assert answer.status == 200
    finally:
        down = subprocess.run([*fencegate, "down", "--dir", str(state)], capture_output=True, text=True,
                              check=False, timeout=120)  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert {"gateway-0", "gateway-1", "haproxy-0"} <= set(json.loads(down.stdout)["stopped"])
    assert [pid for pid in pids if _alive(pid)] == []


def _alive(pid: int) -> bool:
    """Running, not a zombie: the processes outlive the `up` process, so init reaps them, maybe late."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize(
    ("extra", "said"),
    [([], "give a new or empty --dir"), (["--etcd", "-1"], "give 0 or more")],
    ids=["valid", "refused-on-parsing"],
)
def test_cluster_up_leaves_a_directory_of_someone_elses_files_alone(
    tmp_path: Path, extra: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cluster down` (and a failed `up`) removes the state directory, so `up` refuses one it did not make."""
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    status: int | str | None
    try:
        status = main(["cluster", "up", "--redis", "0", "--dir", str(mine), *extra])
    except SystemExit as parsed:  # refused by the parser itself, before anything ran
        status = parsed.code
    assert status == 2
    assert said in capsys.readouterr().err
    assert (mine / "thesis.tex").read_text() == "precious"


def test_a_part_the_cluster_lacks_is_named_with_the_option_that_starts_it(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "empty")
    with pytest.raises(ClusterError, match=r"fencegate cluster up --gateways N"):
        _ = cluster.load_balancer
    with pytest.raises(ClusterError, match=r"fencegate cluster up --postgres`"):
        _ = cluster.postgres_dsn
