"""The S3 identity `make-secrets.sh` writes for compose's profile `s3` works on a real SeaweedFS.

The store runs as `fencegate cluster up --s3` runs it (the release the image
pins), with the identities file the script wrote in place of the mounted
secret `s3_identities`; the cluster's readiness is a request signed with the
keys of the script's AWS credentials file (it creates the bucket), and an
unsigned request is refused.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from fencegate.lab.cluster import local
from fencegate.lab.cluster.local import ClusterSpec, LocalCluster
from fencegate.lab.cluster.seaweed import BUCKET, IDENTITY_FILE, s3_node
from fencegate.lab.cluster.servers import Node

COMPOSE = Path(__file__).resolve().parents[2] / "compose"


def test_the_stores_identity_from_make_secrets_signs_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "compose"
    copy.mkdir()
    shutil.copy(COMPOSE / "make-secrets.sh", copy)
    subprocess.run(["sh", str(copy / "make-secrets.sh")], check=True, capture_output=True, timeout=60)
    credentials = configparser.ConfigParser()
    credentials.read(copy / "secrets" / "s3-credentials")
    keys = [credentials["default"]["aws_access_key_id"], credentials["default"]["aws_secret_access_key"]]

    def compose_identity(name: str, data_dir: Path) -> Node:
        node = s3_node(name, data_dir)
        shutil.copy(copy / "secrets" / "s3-identities.json", data_dir / IDENTITY_FILE)
        node.login = keys
        return node

    monkeypatch.setattr(local, "s3_node", compose_identity)
    with LocalCluster.running(ClusterSpec(redis=0, s3=True), tmp_path / "cluster") as cluster:
        store = cluster.s3
        assert (store["access_key"], store["secret_key"]) == tuple(keys)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{store['endpoint']}/{BUCKET}/", timeout=10)  # noqa: S310 - loopback
        refused.value.close()
        assert refused.value.code == 403
