"""How each kind of server is found, configured, started and probed.

Everything here is about one server process; `LocalCluster` owns the set.
Probes are plain sockets (or pg_isready) so readiness never depends on the
client libraries under test.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fencegate.lab.cluster.errors import MissingServerError

HOST = "127.0.0.1"
ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
PROBE_TIMEOUT = 0.5
# HTTP servers are ready when this path answers 200: a gateway once its storage answers,
# HAProxy once it routes to at least one ready gateway
HTTP_PROBES = {"gateway": "/readyz", "haproxy": "/readyz"}


@dataclass
class Node:
    """One server process of the cluster, as recorded in the state file."""

    name: str
    kind: str  # "redis" | "zookeeper" | "postgres" | "gateway" | "haproxy"
    port: int
    argv: list[str]
    data_dir: str
    log: str
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    pid: int | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        if self.kind == "redis":
            return f"redis://{HOST}:{self.port}"
        if self.kind == "postgres":
            return f"postgresql://postgres@{HOST}:{self.port}/postgres"
        if self.kind in HTTP_PROBES:
            return f"http://{HOST}:{self.port}"
        return self.address


def free_port() -> int:
    """A port the kernel just called free; a start that loses the race is retried."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _require(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise MissingServerError(binary, package=package)
    return path


def postgres_bindir() -> str:
    """The newest installed PostgreSQL bin dir (Debian keeps them versioned)."""
    override = os.environ.get("FENCEGATE_PG_BINDIR")
    if override:
        candidates = [override]
    else:
        candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    for bindir in reversed(candidates):
        if os.access(os.path.join(bindir, "postgres"), os.X_OK):
            return bindir
    raise MissingServerError("postgres", package="postgresql")


def redis_node(name: str, data_dir: Path, *, aof: bool = False, args: tuple[str, ...] = ()) -> Node:
    """A redis-server master; persistence is off unless `aof` (fsync every write)."""
    binary = _require("redis-server", "redis-server")
    port = free_port()
    argv = [
        binary, "--port", str(port), "--bind", HOST, "--dir", str(data_dir),
        "--daemonize", "no", "--protected-mode", "no", "--save", "",
        "--appendonly", "yes" if aof else "no", "--appendfsync", "always",
        "--logfile", "", *args,
    ]  # fmt: skip
    return Node(name, "redis", port, argv, str(data_dir), str(data_dir / "server.log"))


@dataclass(frozen=True)
class ZooKeeperPeer:
    """One member of an ensemble: its id and its quorum and election ports."""

    myid: int
    quorum_port: int
    election_port: int


def zookeeper_node(
    name: str, data_dir: Path, *, peers: tuple[ZooKeeperPeer, ...] = (), myid: int = 0
) -> Node:
    """A ZooKeeper JVM with 4-letter probes on; standalone unless `peers` names an ensemble."""
    java = _require("java", "default-jre-headless")
    if not os.path.exists(ZOOKEEPER_JAR):
        raise MissingServerError(ZOOKEEPER_JAR, package="zookeeper")
    port = free_port()
    conf = data_dir / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (data_dir / "data").mkdir(exist_ok=True)
    servers = "".join(f"server.{p.myid}={HOST}:{p.quorum_port}:{p.election_port}\n" for p in peers)
    if peers:
        (data_dir / "data" / "myid").write_text(f"{myid}\n")
    (conf / "zoo.cfg").write_text(
        f"tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={data_dir / 'data'}\n"
        f"clientPort={port}\nclientPortAddress={HOST}\nadmin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat\nmaxSessionTimeout=60000\n" + servers
    )
    (conf / "log4j.properties").write_text(
        "log4j.rootLogger=WARN, CONSOLE\n"
        "log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n"
        "log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.CONSOLE.layout.ConversionPattern=%d %p %c{1}: %m%n\n"
    )
    argv = [
        java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        f"-Dzookeeper.log.dir={data_dir}",
        f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
        "-cp", f"{conf}:{ZOOKEEPER_JAR}",
        "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(conf / "zoo.cfg"),
    ]  # fmt: skip
    return Node(name, "zookeeper", port, argv, str(data_dir), str(data_dir / "server.log"))


def postgres_node(name: str, data_dir: Path, *, user: str | None) -> Node:
    """A throwaway PostgreSQL cluster; initdb runs here, as `user` when given."""
    bindir = postgres_bindir()
    port = free_port()
    pgdata = data_dir / "pgdata"
    if not pgdata.exists():
        subprocess.run(
            [f"{bindir}/initdb", "-D", str(pgdata), "-U", "postgres", "--auth=trust",
             "-E", "UTF8", "--no-sync", "--locale=C"],
            check=True, capture_output=True, user=user, group=user, cwd=data_dir,
        )  # fmt: skip
    argv = [
        f"{bindir}/postgres", "-D", str(pgdata), "-p", str(port),
        "-c", f"listen_addresses={HOST}", "-c", f"unix_socket_directories={data_dir}",
        "-c", "max_connections=300", "-c", "shared_buffers=64MB",
    ]  # fmt: skip
    return Node(name, "postgres", port, argv, str(data_dir), str(data_dir / "server.log"), user=user)


def probe(node: Node) -> bool:
    """True once the server answers its protocol, not merely accepts TCP."""
    if node.kind == "postgres":
        result = subprocess.run(
            [f"{postgres_bindir()}/pg_isready", "-q", "-h", HOST, "-p", str(node.port), "-t", "1"],
            check=False,
        )
        return result.returncode == 0
    if node.kind in HTTP_PROBES:
        return _http_ok(node.port, HTTP_PROBES[node.kind])
    question, answer = {
        "redis": (b"PING\r\n", b"+PONG"),
        "zookeeper": (b"srvr", b"Mode: "),
    }[node.kind]
    try:
        with socket.create_connection((HOST, node.port), timeout=PROBE_TIMEOUT) as sock:
            sock.sendall(question)
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
                if answer in reply:
                    return True
                if node.kind == "redis":
                    return False
    except OSError:
        return False
    return answer in reply


def _http_ok(port: int, path: str) -> bool:
    request = f"GET {path} HTTP/1.0\r\nHost: {HOST}\r\n\r\n".encode()
    try:
        with socket.create_connection((HOST, port), timeout=PROBE_TIMEOUT) as sock:
            sock.sendall(request)
            status_line = sock.recv(64).split(b"\r\n", 1)[0]
    except OSError:
        return False
    return status_line.split(b" ")[1:2] == [b"200"]
