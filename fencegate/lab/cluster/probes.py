"""Whether a server is ready: it answers its own protocol, not merely accepts TCP.

Probes are plain sockets (or pg_isready) so readiness never depends on the
client libraries under test, and they check no certificate: tests start TLS
servers with bad ones on purpose. An S3 store is ready once its bucket
exists (`seaweed.bucket_ready`); an etcd member once it is part of a quorum.
"""

from __future__ import annotations

import socket
import subprocess

from fencegate.lab.cluster.seaweed import bucket_ready
from fencegate.lab.cluster.servers import HOST, Node, postgres_bindir
from lockclient.tls import client_context

PROBE_TIMEOUT = 0.5
# HTTP servers are ready when this path answers 200: a gateway once its storage answers,
# HAProxy once it routes to at least one ready gateway
HTTP_PROBES = {"gateway": "/readyz", "haproxy": "/readyz"}
# an etcd member answers 200 on /health once it is part of a quorum with a leader (503 before and
# while the cluster has no quorum): ready means it can serve a write
ETCD_HEALTH = "/health"


def ready(node: Node) -> bool:
    """True once `node` can serve: a store its bucket, any other server its protocol."""
    return bucket_ready(node) if node.kind == "s3" else probe(node)


def etcd_is_leader(node: Node) -> bool:
    """True if this member says it is the leader (its `etcd_server_is_leader` metric)."""
    return b"\netcd_server_is_leader 1" in _http_get(node, "/metrics", limit=1 << 20)[1]


def probe(node: Node) -> bool:
    """True once the server answers its protocol, not merely accepts TCP."""
    if node.kind == "postgres":
        result = subprocess.run(
            [f"{postgres_bindir()}/pg_isready", "-q", "-h", HOST, "-p", str(node.port), "-t", "1"],
            check=False,
        )
        return result.returncode == 0
    if node.kind in HTTP_PROBES:
        return _http_get(node, HTTP_PROBES[node.kind])[0] == 200
    if node.kind == "etcd":
        return _http_get(node, ETCD_HEALTH)[0] == 200
    question, answers = {
        "redis": (b"PING\r\n", (b"+PONG", b"-NOAUTH")),  # an ACL-only master answers, asking for a login
        "zookeeper": (b"srvr", (b"Mode: ",)),
    }[node.kind]
    try:
        with _probe_socket(node) as sock:
            sock.sendall(question)
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
                if any(answer in reply for answer in answers):
                    return True
                if node.kind == "redis":
                    return False
    except OSError:
        return False
    return any(answer in reply for answer in answers)


def _probe_socket(node: Node) -> socket.socket:
    """A connection to `node`, over TLS for a TLS-only Redis, ZooKeeper or etcd.

    The probe asks whether the server answers, not whether its certificate is
    good: it checks no certificate (tests start servers with bad ones on
    purpose), and presents the client certificate the server requires.
    """
    sock = socket.create_connection((HOST, node.port), timeout=PROBE_TIMEOUT)
    if not node.tls:
        return sock
    prefix = "ssl_" if node.kind == "redis" else ""  # redis-py's parameter names, or kazoo's
    # readiness only, so no verification: the clients under test verify
    context = client_context(
        ca=None, cert=node.tls.get(f"{prefix}certfile"), key=node.tls.get(f"{prefix}keyfile"), verify=False
    )
    try:
        return context.wrap_socket(sock)
    except OSError:
        sock.close()
        raise


def _http_get(node: Node, path: str, *, limit: int = 64) -> tuple[int, bytes]:
    """(status, up to `limit` bytes of the response) of one GET (HTTPS to a TLS node); (0, b"") if
    nothing answered."""
    request = f"GET {path} HTTP/1.0\r\nHost: {HOST}\r\n\r\n".encode()
    reply = b""
    try:
        with _probe_socket(node) as sock:
            sock.sendall(request)
            while len(reply) < limit and (chunk := sock.recv(65536)):
                reply += chunk
    except OSError:
        return 0, b""
    status = reply.split(b"\r\n", 1)[0].split(b" ")[1:2]
    return (int(status[0]) if status and status[0].isdigit() else 0), reply
