"""`fencegate demo`: start a 5-node local cluster, show it, stop it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from lab.cluster import ClusterSpec, LocalCluster


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo",
        help="start a 5-master local cluster, print it, and stop it",
        description="Start five redis-server masters on loopback, print their endpoints, stop them.",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with LocalCluster.running(ClusterSpec(redis=5)) as cluster:
        print(json.dumps(cluster.endpoints(), indent=2))
    return 0
