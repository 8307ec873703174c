"""How each kind of server is found, configured, started and probed.

Everything here is about one server process; `LocalCluster` owns the set.
Probes are plain sockets (or pg_isready) so readiness never depends on the
client libraries under test.

PostgreSQL, ZooKeeper and etcd can also run TLS only (`ServerTLS`): PostgreSQL
with `ssl=on` and `hostssl` lines alone in its pg_hba.conf, ZooKeeper with a
secure client port and no plaintext one, etcd with `https://` client URLs.
Their certificates name 127.0.0.1 only, so `localhost` is a host name the
certificate does not list (tests use it for the wrong-host case). A TLS node records what a client needs in
`Node.tls`, in its URL's own parameter names.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

from fencegate.lab.cluster.certs import KeyPair
from fencegate.lab.cluster.errors import MissingServerError
from lockclient.tls import client_context

HOST = "127.0.0.1"
ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
# Debian's zookeeper.jar lists Netty in its manifest but not netty-codec, which the secure client port
# (Netty's SslHandler) needs; both come with libnetty-java, a dependency of the zookeeper package
ZOOKEEPER_NETTY_CODEC = "/usr/share/java/netty-codec.jar"
TLS_MODES = ("server", "mutual")  # the server's certificate only / a client certificate required too
PROBE_TIMEOUT = 0.5
# HTTP servers are ready when this path answers 200: a gateway once its storage answers,
# HAProxy once it routes to at least one ready gateway
HTTP_PROBES = {"gateway": "/readyz", "haproxy": "/readyz"}
# an etcd member answers 200 on /health once it is part of a quorum with a leader (503 before and
# while the cluster has no quorum): ready means it can serve a write
ETCD_HEALTH = "/health"
ETCD_ELECTION_MS = 1000  # etcd's default; a loaded 2-core machine needs the slack against needless elections
ETCD_HEARTBEAT_MS = 100
ETCD_COMPACTION_RETENTION = 10_000  # revisions of history kept: each token is one, the database stays small


@dataclass
class Node:
    """One server process of the cluster, as recorded in the state file."""

    name: str
    kind: str  # "redis" | "zookeeper" | "postgres" | "etcd" | "s3" | "gateway" | "haproxy"
    port: int
    argv: list[str]
    data_dir: str
    log: str
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    pid: int | None = None
    # a client's TLS parameters in its URL's names (redis-py's ssl_ca_certs, ..., libpq's sslrootcert, ...,
    # kazoo's ca, ...)
    tls: dict[str, str] = field(default_factory=dict)
    # [user, password] of its ACL user, if it has one; an S3 store's [access key, secret]
    login: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def query(self) -> str:
        """`?` and the TLS parameters, or nothing for a plaintext server."""
        return "?" + urlencode(self.tls, safe="/") if self.tls else ""

    @property
    def url(self) -> str:
        if self.kind == "redis":
            login = f"{quote(self.login[0], safe='')}:{quote(self.login[1], safe='')}@" if self.login else ""
            if self.tls:
                return f"rediss://{login}{HOST}:{self.port}?{urlencode(self.tls)}"
            return f"redis://{login}{HOST}:{self.port}"
        if self.kind == "postgres":
            return f"postgresql://postgres@{HOST}:{self.port}/postgres{self.query}"
        if self.kind == "etcd":
            return f"etcd://{HOST}:{self.port}{self.query}"
        if self.kind == "zookeeper":
            return f"zookeeper://{HOST}:{self.port}{self.query}"
        if self.kind in HTTP_PROBES or self.kind == "s3":
            return f"http://{HOST}:{self.port}"
        return self.address


def zookeeper_url(members: Sequence[Node]) -> str:
    """The token source URL of an ensemble: every member, and the TLS parameters if it has them."""
    return "zookeeper://" + ",".join(n.address for n in members) + (members[0].query if members else "")


@dataclass(frozen=True)
class ServerTLS:
    """What one TLS server gets: its certificate, the CA (which also vouches for clients), and the
    client certificate a client shows; the server requires one only when `mutual`."""

    ca: Path
    server: KeyPair
    client: KeyPair
    mutual: bool


def _private_copy(source: Path, target: Path, user: str | None, *, mode: int = 0o600) -> Path:
    """A copy the server's user owns: PostgreSQL refuses a key file anyone else can read."""
    shutil.copyfile(source, target)
    os.chmod(target, mode)
    if user is not None:
        shutil.chown(target, user, user)
    return target


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


@dataclass(frozen=True)
class RedisTLS:
    """A TLS-only master's certificates: its own, the CA that signed it (which its clients trust, and
    by which it checks theirs), and the client certificate it requires (None: it requires none)."""

    ca: Path
    server: KeyPair
    client: KeyPair | None = None

    def client_settings(self) -> dict[str, str]:
        """What a client of this master sets, as redis-py's URL parameters."""
        settings = {"ssl_ca_certs": str(self.ca)}
        if self.client is not None:
            settings |= {"ssl_certfile": str(self.client.cert), "ssl_keyfile": str(self.client.key)}
        return settings


def redis_node(
    name: str, data_dir: Path, *, aof: bool = False, args: tuple[str, ...] = (),
    tls: RedisTLS | None = None, login: tuple[str, str] | None = None,
) -> Node:  # fmt: skip
    """A redis-server master; persistence is off unless `aof` (fsync every write).

    With `tls` it listens on TLS only (`--port 0 --tls-port P`); with `login`
    its only user is that ACL user (the default user is off).
    """
    binary = _require("redis-server", "redis-server")
    port = free_port()
    listen = ["--port", str(port)]
    if tls is not None:
        listen = [
            "--port", "0", "--tls-port", str(port),
            "--tls-cert-file", str(tls.server.cert), "--tls-key-file", str(tls.server.key),
            "--tls-ca-cert-file", str(tls.ca), "--tls-auth-clients", "no" if tls.client is None else "yes",
        ]  # fmt: skip
    users = []
    if login is not None:
        user, password = login
        users = ["--user", "default", "off", "--user", user, "on", f">{password}", "~*", "&*", "+@all"]
    argv = [
        binary, *listen, "--bind", HOST, "--dir", str(data_dir),
        "--daemonize", "no", "--protected-mode", "no", "--save", "",
        "--appendonly", "yes" if aof else "no", "--appendfsync", "always",
        "--logfile", "", *users, *args,
    ]  # fmt: skip
    node = Node(name, "redis", port, argv, str(data_dir), str(data_dir / "server.log"))
    node.tls = tls.client_settings() if tls is not None else {}
    node.login = list(login) if login is not None else []
    return node


@dataclass(frozen=True)
class ZooKeeperPeer:
    """One member of an ensemble: its id and its quorum and election ports."""

    myid: int
    quorum_port: int
    election_port: int


def zookeeper_tls_settings(*, keystore: str, truststore: str, mutual: bool) -> dict[str, str]:
    """zoo.cfg settings of a secure client port (beside the port itself): Netty, PEM key and trust
    stores, client certificates required when `mutual`. Compose's ZOO_CFG_EXTRA holds the same
    (tests/deploy keeps them equal)."""
    return {
        "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
        "ssl.keyStore.location": keystore,
        "ssl.keyStore.type": "PEM",
        "ssl.trustStore.location": truststore,
        "ssl.trustStore.type": "PEM",
        "ssl.clientAuth": "need" if mutual else "none",
    }


def postgres_tls_settings(*, cert: str, key: str, ca: str, hba: str) -> dict[str, str]:
    """PostgreSQL's TLS settings (`-c NAME=VALUE`); compose's postgres command holds the same."""
    return {"ssl": "on", "ssl_cert_file": cert, "ssl_key_file": key, "ssl_ca_file": ca, "hba_file": hba}


def _zookeeper_tls(conf: Path, port: int, tls: ServerTLS) -> tuple[str, dict[str, str]]:
    """zoo.cfg lines for a secure client port only, and a client's kazoo settings for it."""
    keystore = conf / "server.pem"  # ZooKeeper's PEM key store: the key and the certificate in one file
    keystore.write_bytes(tls.server.key.read_bytes() + tls.server.cert.read_bytes())
    os.chmod(keystore, 0o600)
    settings = zookeeper_tls_settings(keystore=str(keystore), truststore=str(tls.ca), mutual=tls.mutual)
    lines = f"secureClientPort={port}\nsecureClientPortAddress={HOST}\n" + "".join(
        f"{name}={value}\n" for name, value in settings.items()
    )
    client = {"use_ssl": "true", "ca": str(tls.ca)}
    if tls.mutual:
        client |= {"certfile": str(tls.client.cert), "keyfile": str(tls.client.key)}
    return lines, client


def zookeeper_node(
    name: str,
    data_dir: Path,
    *,
    peers: tuple[ZooKeeperPeer, ...] = (),
    myid: int = 0,
    tls: ServerTLS | None = None,
) -> Node:
    """A ZooKeeper JVM with 4-letter probes on; standalone unless `peers` names an ensemble.

    With `tls`, clients reach it only on its secure client port (the members'
    quorum traffic stays plaintext on loopback).
    """
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
    client_tls: dict[str, str] = {}
    if tls is None:
        listen = f"clientPort={port}\nclientPortAddress={HOST}\n"
    else:
        listen, client_tls = _zookeeper_tls(conf, port, tls)
    (conf / "zoo.cfg").write_text(
        f"tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={data_dir / 'data'}\n"
        f"{listen}admin.enableServer=false\n"
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
        "-cp", f"{conf}:{ZOOKEEPER_JAR}" + (f":{ZOOKEEPER_NETTY_CODEC}" if tls else ""),
        "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(conf / "zoo.cfg"),
    ]  # fmt: skip
    if tls is not None and not os.path.exists(ZOOKEEPER_NETTY_CODEC):
        raise MissingServerError(ZOOKEEPER_NETTY_CODEC, package="libnetty-java")
    node = Node(name, "zookeeper", port, argv, str(data_dir), str(data_dir / "server.log"))
    node.tls = client_tls
    return node


@dataclass(frozen=True)
class EtcdPeer:
    """One member of an etcd cluster: its name and its client and peer ports."""

    name: str
    client_port: int
    peer_port: int

    @property
    def peer_url(self) -> str:
        return f"http://{HOST}:{self.peer_port}"


def etcd_node(
    name: str, data_dir: Path, *, peers: tuple[EtcdPeer, ...], me: EtcdPeer, token: str,
    tls: ServerTLS | None = None,
) -> Node:  # fmt: skip
    """One etcd member of the cluster `peers` on loopback; its data survives a restart.

    `--initial-cluster*` only matter for the first start: a member that finds
    its data dir again rejoins from its own write-ahead log. With `tls`, its
    clients reach it over TLS only (`https://`); the members' peer traffic
    stays plaintext on loopback. `mutual`: clients must show a certificate
    signed by the cluster's CA (`--client-cert-auth`).
    """
    binary = _require("etcd", "etcd-server")
    client = f"{'https' if tls else 'http'}://{HOST}:{me.client_port}"
    client_tls: dict[str, str] = {}
    flags: list[str] = []
    if tls is not None:
        flags = ["--cert-file", str(tls.server.cert), "--key-file", str(tls.server.key)]
        if tls.mutual:
            flags += ["--trusted-ca-file", str(tls.ca), "--client-cert-auth"]
        client_tls = {"use_ssl": "true", "ca": str(tls.ca)}
        if tls.mutual:
            client_tls |= {"certfile": str(tls.client.cert), "keyfile": str(tls.client.key)}
    argv = [
        binary, "--name", me.name, "--data-dir", str(data_dir / "data"),
        "--listen-client-urls", client, "--advertise-client-urls", client,
        "--listen-peer-urls", me.peer_url, "--initial-advertise-peer-urls", me.peer_url,
        "--initial-cluster", ",".join(f"{p.name}={p.peer_url}" for p in peers),
        "--initial-cluster-state", "new", "--initial-cluster-token", token,
        "--heartbeat-interval", str(ETCD_HEARTBEAT_MS), "--election-timeout", str(ETCD_ELECTION_MS),
        "--auto-compaction-mode", "revision", "--auto-compaction-retention", str(ETCD_COMPACTION_RETENTION),
        "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn", *flags,
    ]  # fmt: skip
    node = Node(name, "etcd", me.client_port, argv, str(data_dir), str(data_dir / "server.log"))
    node.tls = client_tls
    return node


def etcd_is_leader(node: Node) -> bool:
    """True if this member says it is the leader (its `etcd_server_is_leader` metric)."""
    return b"\netcd_server_is_leader 1" in _http_get(node, "/metrics", limit=1 << 20)[1]


def _postgres_tls(data_dir: Path, user: str | None, tls: ServerTLS) -> tuple[list[str], dict[str, str]]:
    """Server settings for TLS only (`hostssl` lines alone; a client certificate whose name is the role
    when `mutual`), and a client's libpq parameters for it."""
    own = data_dir / "tls"
    own.mkdir(exist_ok=True)
    if user is not None:
        shutil.chown(own, user, user)
    cert = _private_copy(tls.server.cert, own / "server.crt", user, mode=0o644)
    key = _private_copy(tls.server.key, own / "server.key", user)
    ca = _private_copy(tls.ca, own / "ca.pem", user, mode=0o644)
    check = " clientcert=verify-full" if tls.mutual else ""
    hba = data_dir / "pg_hba_tls.conf"
    hba.write_text(
        "# written by the fencegate cluster helper: TLS only over TCP\n"
        "local all all trust\n"
        f"hostssl all all {HOST}/32 trust{check}\n"
    )
    os.chmod(hba, 0o644)
    settings = postgres_tls_settings(cert=str(cert), key=str(key), ca=str(ca), hba=str(hba))
    client = {"sslmode": "verify-full", "sslrootcert": str(tls.ca)}
    if tls.mutual:
        client |= {"sslcert": str(tls.client.cert), "sslkey": str(tls.client.key)}
    return [arg for name, value in settings.items() for arg in ("-c", f"{name}={value}")], client


def postgres_node(name: str, data_dir: Path, *, user: str | None, tls: ServerTLS | None = None) -> Node:
    """A throwaway PostgreSQL cluster; initdb runs here, as `user` when given. With `tls`, TLS only."""
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
    node = Node(name, "postgres", port, argv, str(data_dir), str(data_dir / "server.log"), user=user)
    if tls is not None:
        settings, node.tls = _postgres_tls(data_dir, user, tls)
        node.argv += settings
    return node


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
