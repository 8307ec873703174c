"""The cluster's SeaweedFS S3 store: signed requests only, its data in the state dir, stopped by PID."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from fencegate.lab.cluster import LocalCluster
from tests.lab.test_cluster import _alive


def _client(store: dict[str, str], *, secret: str | None = None) -> Any:
    return botocore.session.get_session().create_client(
        "s3",
        endpoint_url=store["endpoint"],
        region_name=store["region"],
        aws_access_key_id=store["access_key"],
        aws_secret_access_key=secret or store["secret_key"],
        config=Config(retries={"max_attempts": 1}),
    )


def test_the_store_keeps_a_signed_write_and_refuses_unsigned_and_wrongly_signed_requests(
    s3_cluster: LocalCluster,
) -> None:
    store = s3_cluster.s3
    client = _client(store)
    client.put_object(Bucket=store["bucket"], Key="cluster-test/signed", Body=b"kept")
    got = client.get_object(Bucket=store["bucket"], Key="cluster-test/signed")
    assert got["Body"].read() == b"kept"

    host, port = store["endpoint"].removeprefix("http://").split(":")
    path = f"/{store['bucket']}/cluster-test/signed"
    for method, body in (("GET", None), ("PUT", b"unsigned")):
        connection = http.client.HTTPConnection(host, int(port), timeout=5)
        try:
            connection.request(method, path, body=body)
            assert connection.getresponse().status == 403
        finally:
            connection.close()
    wrong = _client(store, secret=store["secret_key"] + "x")
    with pytest.raises(ClientError) as refused:
        wrong.put_object(Bucket=store["bucket"], Key="cluster-test/signed", Body=b"forged")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    got = client.get_object(Bucket=store["bucket"], Key="cluster-test/signed")
    assert got["Body"].read() == b"kept"


def test_cli_up_with_s3_prints_the_store_keeps_its_data_in_the_state_dir_and_down_stops_it(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    cli = [sys.executable, "-m", "fencegate.cli", "cluster"]
    up = subprocess.run([*cli, "up", "--redis", "0", "--s3", "--dir", str(state)],
                        capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    endpoints = json.loads(up.stdout)
    store = endpoints["s3"]
    assert store["endpoint"].startswith("http://127.0.0.1:")
    assert all(store[name] for name in ("bucket", "access_key", "secret_key"))
    pids = list(endpoints["pids"].values())
    assert len(pids) == 1
    assert _alive(pids[0])
    try:
        body = os.urandom(4096)  # incompressible: wherever weed keeps it, it takes this much room
        data = state / "s3-0" / "data"
        before = sum(path.stat().st_size for path in data.rglob("*") if path.is_file())
        _client(store).put_object(Bucket=store["bucket"], Key="in-state-dir", Body=body)
        after = sum(path.stat().st_size for path in data.rglob("*") if path.is_file())
        assert after - before >= len(body)
    finally:
        subprocess.run([*cli, "down", "--dir", str(state)], capture_output=True, check=True, timeout=120)
    assert not _alive(pids[0])
