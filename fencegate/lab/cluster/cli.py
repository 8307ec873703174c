"""`fencegate cluster up|down|status`: real servers on loopback, by hand."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from fencegate.lab.cluster.errors import ClusterError
from fencegate.lab.cluster.local import ClusterSpec, LocalCluster

DEFAULT_DIR = ".state/cluster"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "cluster",
        help="start or stop a local cluster of real servers",
        description=(
            "Start real redis-server masters, ZooKeeper, PostgreSQL, etcd and gateways behind HAProxy "
            "on loopback on free ports, record their PIDs and endpoints in DIR/cluster.json, "
            "and stop exactly those processes again."
        ),
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    up = actions.add_parser("up", help="start servers and print their endpoints as JSON")
    up.add_argument(
        "--redis",
        type=int,
        default=5,
        metavar="N",
        help="number of independent redis-server masters (default: %(default)s)",
    )
    up.add_argument(
        "--aof",
        action="store_true",
        help="turn on Redis AOF persistence with fsync on every write "
        "(default: persistence off, as the lab's restart faults need)",
    )
    up.add_argument(
        "--zookeeper", action="store_true", help="also start a standalone ZooKeeper (token source)"
    )
    up.add_argument(
        "--zookeeper-ensemble",
        type=int,
        default=0,
        metavar="N",
        help="start a ZooKeeper ensemble of N members instead of one standalone server",
    )
    up.add_argument(
        "--postgres",
        action="store_true",
        help="also start a throwaway PostgreSQL cluster (token source, storage)",
    )
    up.add_argument(
        "--etcd",
        type=int,
        default=0,
        metavar="N",
        help="also start an etcd cluster of N members (token source; its URL is `etcd` in the endpoints, "
        "etcd://127.0.0.1:PORT,...) (default: %(default)s, none)",
    )
    up.add_argument(
        "--gateways",
        type=int,
        default=0,
        metavar="N",
        help="also start N `fencegate serve` replicas (on the PostgreSQL if any, tokens from ZooKeeper) "
        "behind one HAProxy, whose URL is `load_balancer` in the endpoints",
    )
    up.add_argument(
        "--dir",
        default=DEFAULT_DIR,
        metavar="PATH",
        help="state dir for data, logs and cluster.json (default: %(default)s)",
    )
    up.set_defaults(func=_up)

    down = actions.add_parser("down", help="stop the servers recorded in DIR, by PID, and remove DIR")
    down.add_argument(
        "--dir",
        default=DEFAULT_DIR,
        metavar="PATH",
        help="state dir given to `cluster up` (default: %(default)s)",
    )
    down.set_defaults(func=_down)

    status = actions.add_parser("status", help="print each recorded server and whether it runs")
    status.add_argument(
        "--dir",
        default=DEFAULT_DIR,
        metavar="PATH",
        help="state dir given to `cluster up` (default: %(default)s)",
    )
    status.set_defaults(func=_status)  # fmt: skip

    check = actions.add_parser(
        "check",
        help="drive a short fenced load through the load balancer and check the gateway's promises",
        description="Workers take Redlock leases with tokens and write through the gateway; then every "
        "acknowledged write must still be there and accepted tokens must never have gone back. "
        "Target the native topology with --dir, or any deployment with --gateway, --redis and --tokens.",
    )
    check.add_argument("--dir", metavar="PATH", help="state dir of a `cluster up --gateways N` topology")
    check.add_argument("--gateway", metavar="URL", help="the load balancer (or one gateway)")
    check.add_argument("--redis", nargs="+", default=[], metavar="URL", help="the Redlock masters")
    check.add_argument("--tokens", metavar="URL", help="the token source the gateways use (zookeeper://...)")
    check.add_argument("--api-key-file", metavar="PATH", help="file holding the API key to send")
    check.add_argument("--seconds", type=float, default=10.0, help="load duration (default: %(default)s)")
    check.add_argument("--workers", type=int, default=8, help="concurrent clients (default: %(default)s)")
    check.add_argument("--resources", type=int, default=4, help="resources written (default: %(default)s)")
    check.set_defaults(func=_check)


def _up(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.dir)
    if cluster.nodes or (cluster.dir / "cluster.json").exists():
        hint = f"run `fencegate cluster down --dir {args.dir}` first"
        print(f"a cluster is already recorded in {args.dir}: {hint}", file=sys.stderr)
        return 1
    spec = ClusterSpec(
        redis=args.redis,
        zookeeper=args.zookeeper,
        zookeeper_ensemble=args.zookeeper_ensemble,
        postgres=args.postgres,
        etcd=args.etcd,
        aof=args.aof,
        gateways=args.gateways,
    )
    try:
        cluster.up(spec)
    except ClusterError as exc:
        cluster.stop_all()
        print(f"fencegate cluster up: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(cluster.endpoints(), indent=2))
    return 0


def _down(args: argparse.Namespace) -> int:
    try:
        cluster = LocalCluster.attach(args.dir)
    except ClusterError as exc:
        print(f"fencegate cluster down: {exc}", file=sys.stderr)
        return 1
    stopped = [name for name in cluster.nodes if cluster.is_running(name)]
    cluster.stop_all()
    print(json.dumps({"stopped": stopped, "removed": args.dir}))
    return 0


def _status(args: argparse.Namespace) -> int:
    try:
        cluster = LocalCluster.attach(args.dir)
    except ClusterError as exc:
        print(f"fencegate cluster status: {exc}", file=sys.stderr)
        return 1
    rows = {name: {"url": node.url, "pid": node.pid, "running": cluster.is_running(name)}
            for name, node in cluster.nodes.items()}  # fmt: skip
    print(json.dumps(rows, indent=2))
    return 0


def _check(args: argparse.Namespace) -> int:
    from fencegate.lab.cluster.loadcheck import check_deployment
    from fencegate.lab.cluster.topology import gateway_backends
    from lockclient import LockClientError, open_token_source

    gateway, redis, tokens = args.gateway, args.redis, args.tokens
    if args.dir is not None:
        try:
            cluster = LocalCluster.attach(args.dir)
            gateway = gateway or cluster.load_balancer
        except ClusterError as exc:
            print(f"fencegate cluster check: {exc}", file=sys.stderr)
            return 1
        redis = redis or cluster.redis_urls
        tokens = tokens or gateway_backends(cluster.dir, cluster.nodes.values())[1]
    if not (gateway and redis and tokens):
        print("fencegate cluster check: give --dir, or --gateway, --redis and --tokens", file=sys.stderr)
        return 2
    api_key = Path(args.api_key_file).read_text().strip() if args.api_key_file else None
    try:
        report = asyncio.run(
            check_deployment(
                gateway_url=gateway, redis=redis, tokens=open_token_source(tokens), seconds=args.seconds,
                workers=args.workers, resources=args.resources, api_key=api_key,
            )
        )  # fmt: skip
    except (LockClientError, ClusterError) as exc:
        print(f"fencegate cluster check: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2))
    return 0 if not report["problems"] and report["acknowledged"] else 1
