"""`fencegate demo`: start 5 Redis masters, take one fenced lease, show it, stop everything.

It uses only public API (the sync facade and SQLite tokens in a temp dir),
so it doubles as the shortest working example of a lease with a token.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from fencegate.cli import describe
from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import SQLiteTokens
from lockclient.sync import Redlock

RESOURCE = "demo-invoices"
TTL = 10.0


def configure(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Start five redis-server masters on loopback, take a Redlock lease whose fencing token comes from "
        "a SQLite file in a temp dir, print it as JSON, release it and stop the servers.",
        "fencegate demo",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="fencegate-demo-") as tmp:
        with LocalCluster.running(ClusterSpec(redis=5), Path(tmp) / "cluster") as cluster:
            tokens = SQLiteTokens(Path(tmp) / "tokens.db")
            with (
                Redlock(cluster.redis_urls, tokens=tokens) as locker,
                locker.lock(RESOURCE, ttl=TTL) as lease,
            ):
                shown = {
                    "resource": lease.resource,
                    "token": lease.token,
                    "ttl_s": TTL,
                    "validity_s": round(lease.remaining(), 4),
                    "nodes": dict(lease.nodes),
                }
        print(json.dumps(shown, indent=2))
    return 0
