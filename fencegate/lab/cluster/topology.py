"""The deployment's stateless tier on loopback: gateway replicas behind HAProxy.

`compose/docker-compose.yml` runs the same shape in containers. Both configure
the gateways only through `FENCEGATE_*` environment variables. The load
balancer's config is rendered here by `haproxy_config`; compose's
`compose/haproxy.cfg` is written by hand (TLS passes through it in TCP mode),
and tests/deploy holds its balancing, timeouts, retries and health checks
equal to the rendered ones. Gateways share one database (the cluster's PostgreSQL, or one
SQLite file when there is none, which serializes writers across processes on
one machine) and draw their future-token bound from the cluster's ZooKeeper:
a replica keeps no state of its own and can be stopped or added at any time.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from fencegate.lab.cluster.errors import MissingServerError
from fencegate.lab.cluster.servers import HOST, Node, free_port, zookeeper_url

HAPROXY_CFG = "conf/haproxy.cfg"
LB_HEALTH_URI = "/lb-health"  # answered by HAProxy itself: 200 while one gateway is up, else 503
HEALTH_INTERVAL = "1s"  # how often HAProxy asks each gateway's /readyz
FALL = 2  # failed checks before a gateway is taken out of the rotation
RISE = 1  # passed checks before it is put back
SQLITE_SHARED = "gateway-data/fencegate.db"


def gateway_backends(cluster_dir: Path, nodes: Iterable[Node]) -> tuple[str, str | None]:
    """The storage URL and token source URL every replica of this cluster gets."""
    by_kind: dict[str, list[Node]] = {}
    for node in nodes:
        by_kind.setdefault(node.kind, []).append(node)
    postgres = by_kind.get("postgres", [])
    if postgres:
        storage = postgres[0].url
    else:
        path = cluster_dir / SQLITE_SHARED
        path.parent.mkdir(parents=True, exist_ok=True)
        storage = f"sqlite:///{path.resolve()}"
    if by_kind.get("zookeeper"):
        tokens: str | None = zookeeper_url(by_kind["zookeeper"])
    elif postgres:
        tokens = postgres[0].url
    else:
        tokens = None
    return storage, tokens


def gateway_env(*, storage: str, tokens: str | None, host: str, port: int) -> dict[str, str]:
    """The variables compose sets on each gateway service, for one replica."""
    env = {
        "FENCEGATE_STORAGE": storage,
        "FENCEGATE_HOST": host,
        "FENCEGATE_PORT": str(port),
    }
    if tokens is not None:
        env["FENCEGATE_TOKENS"] = tokens
    return env


def gateway_node(name: str, data_dir: Path, *, storage: str, tokens: str | None) -> Node:
    """One `fencegate serve` replica, configured by environment only (the CLI gets no flags)."""
    port = free_port()
    node = Node(
        name,
        "gateway",
        port,
        [sys.executable, "-m", "fencegate.cli", "serve"],
        str(data_dir),
        str(data_dir / "server.log"),
    )
    node.env = gateway_env(storage=storage, tokens=tokens, host=HOST, port=port)
    node.env["FENCEGATE_DATA_DIR"] = str(data_dir / "data")
    return node


def haproxy_config(
    *, bind: str, servers: Sequence[tuple[str, str]], stats_bind: str | None = None, docker_dns: bool = False
) -> str:
    """The load balancer's config; `servers` are (name, host:port) of the gateway replicas.

    Requests are balanced round robin; a gateway whose /readyz fails FALL
    times leaves the rotation. HAProxy retries only when the connection
    failed (its default), so a write is never sent twice by the balancer:
    a write whose answer was lost is reported to the client as 502/504, an
    unknown outcome, exactly like the gateway's own 503.
    """
    lines = [
        "# fencegate's load balancer, rendered by lab.cluster.topology.haproxy_config",
        "# (tests/deploy holds compose/haproxy.cfg's balancing and checks equal to these)",
        "global",
        "    maxconn 4096",
        "",
    ]
    if docker_dns:  # containers get new addresses on restart: resolve names at run time
        lines += ["resolvers docker", "    nameserver dns 127.0.0.11:53", "    hold valid 5s", ""]
    lines += [
        "defaults",
        "    mode http",
        "    log stdout format raw local0",
        "    option httplog",
        "    timeout connect 2s",
        "    timeout client 60s",
        "    timeout server 60s",
        "    retries 2",
        "    option redispatch",
        "",
        "frontend fencegate",
        f"    bind {bind}",
        f"    monitor-uri {LB_HEALTH_URI}",
        "    monitor fail if { nbsrv(gateways) lt 1 }",
        "    default_backend gateways",
        "",
        "backend gateways",
        "    balance roundrobin",
        "    option httpchk GET /readyz",
        "    http-check expect status 200",
    ]
    server_options = f"check inter {HEALTH_INTERVAL} fall {FALL} rise {RISE}"
    if docker_dns:
        server_options += " resolvers docker init-addr last,libc,none"
    lines += [f"    server {name} {address} {server_options}" for name, address in servers]
    if stats_bind is not None:
        lines += [
            "",
            "frontend stats",
            f"    bind {stats_bind}",
            "    http-request use-service prometheus-exporter if { path /metrics }",
            "    stats enable",
            "    stats uri /stats",
        ]
    return "\n".join(lines) + "\n"


def haproxy_binary() -> str:
    """Debian installs HAProxy in /usr/sbin, which a non-root PATH often lacks."""
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise MissingServerError("haproxy", package="haproxy")
    return found


def haproxy_node(name: str, data_dir: Path, gateways: Sequence[Node]) -> Node:
    """HAProxy in the foreground (`-db`) in front of `gateways`, with its generated config."""
    binary = haproxy_binary()
    port = free_port()
    cfg = data_dir / HAPROXY_CFG
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(haproxy_config(bind=f"{HOST}:{port}", servers=[(g.name, g.address) for g in gateways]))
    argv = [binary, "-db", "-f", str(cfg)]
    return Node(name, "haproxy", port, argv, str(data_dir), str(data_dir / "server.log"))
