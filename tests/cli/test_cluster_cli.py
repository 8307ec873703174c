"""`fencegate cluster`: every endpoint is a URL, and a failed check says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencegate.bench.servers import http_server
from fencegate.cli import NO, main
from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.servers import free_port


def test_every_endpoint_and_every_node_is_a_url(zookeeper_cluster: LocalCluster) -> None:
    endpoints = zookeeper_cluster.endpoints()
    assert endpoints["zookeeper"].startswith("zookeeper://127.0.0.1:")
    urls = [node.url for node in zookeeper_cluster.nodes.values()]
    assert urls
    assert all("://" in url for url in urls), urls


def test_a_failed_check_says_why_on_stderr(
    redis_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # no gateway listens there: nothing can be acknowledged
    argv = ["--log-level", "WARNING", "cluster", "check", "--gateway", nowhere,
            "--redis", *redis_cluster.redis_urls, "--tokens", f"sqlite:///{tmp_path / 'tokens.db'}",
            "--seconds", "1", "--workers", "1", "--resources", "1"]  # fmt: skip
    assert main(argv) == NO
    captured = capsys.readouterr()
    assert json.loads(captured.out)["acknowledged"] == 0
    assert "fencegate cluster check: no write was acknowledged in 1 s" in captured.err
    assert "is the gateway up" in captured.err


def test_a_gateway_that_accepts_stale_tokens_fails_the_check(
    redis_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Honest leases never send a stale token, so the check sends one itself: the fence-off yardstick
    (every token accepted) must fail it, whatever else its marks show."""
    argv = ["fencegate.bench.fenceoff", "--log-level", "WARNING", "serve", "--data-dir", str(tmp_path / "gw")]
    with http_server(argv, tmp_path / "fenceoff.log") as (url, _pid):
        code = main(["--log-level", "WARNING", "cluster", "check", "--gateway", url,
                     "--redis", *redis_cluster.redis_urls, "--tokens", f"sqlite:///{tmp_path / 'tokens.db'}",
                     "--seconds", "1", "--workers", "2", "--resources", "1"])  # fmt: skip
    assert code == NO
    err = capsys.readouterr().err
    assert "was accepted" in err, err
    assert "a stale writer gets through" in err
