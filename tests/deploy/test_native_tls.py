"""The deployment's topology with its token source and storage over TLS, as compose's TLS setup runs it.

`fencegate cluster up --zookeeper-tls mutual --postgres-tls mutual --gateways 2`:
two gateway replicas configured only by environment, whose storage URL asks
for `sslmode=verify-full` with a client certificate and whose token source URL
asks for ZooKeeper's secure client port with one; HAProxy in front. Clients
take leases with tokens from the same TLS ZooKeeper.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from fencegate.cli import main
from fencegate.lab.cluster import ClusterSpec, LocalCluster
from tests.databases import client_connections_tls

SPEC = ClusterSpec(redis=3, zookeeper_tls="mutual", postgres_tls="mutual", gateways=2)


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster.running(SPEC, tmp_path_factory.mktemp("deploy-tls")) as cluster:
        yield cluster


def test_gateways_get_tls_urls_for_storage_and_tokens(topology: LocalCluster) -> None:
    ca = str(topology.authority.cert)
    for name in ("gateway-0", "gateway-1"):
        env = topology.nodes[name].env
        storage = parse_qs(urlsplit(env["FENCEGATE_STORAGE"]).query)
        tokens = parse_qs(urlsplit(env["FENCEGATE_TOKENS"]).query)
        assert (storage["sslmode"], storage["sslrootcert"]) == (["verify-full"], [ca])
        assert {"sslcert", "sslkey"} <= set(storage)
        assert (tokens["use_ssl"], tokens["ca"]) == (["true"], [ca])
        assert {"certfile", "keyfile"} <= set(tokens)
        assert env["FENCEGATE_TOKENS"] == topology.zookeeper_url


async def test_load_through_haproxy_is_clean_and_every_storage_connection_is_tls(
    topology: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--log-level", "WARNING", "cluster", "check", "--dir", str(topology.dir), "--seconds", "3"]
    code = await asyncio.to_thread(main, argv)
    report = json.loads(capsys.readouterr().out)
    assert report["problems"] == []
    assert report["acknowledged"] > 0
    assert report["token_source_errors"] == 0
    assert code == 0
    connections = await client_connections_tls(topology.postgres_dsn)
    assert connections == {(True, "/CN=postgres")}  # each replica keeps pooled connections open
