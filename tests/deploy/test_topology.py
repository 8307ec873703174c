"""Pure logic of the native topology: what each replica is given, and the CLI's options."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import build_parser
from lab.cluster import ClusterError, LocalCluster, Node
from lab.cluster.topology import gateway_backends, haproxy_config


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
