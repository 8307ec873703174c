"""A cluster of real servers on loopback, owned by one object.

`LocalCluster` starts redis-server masters, ZooKeeper, PostgreSQL, etcd, a SeaweedFS S3 store (and the
deployment's gateway replicas behind HAProxy, see `topology`) on free
ports, waits until each answers, and records every PID in `cluster.json` in
its state dir. It stops exactly those PIDs (checking that each still runs the
binary it started, so a recycled PID is never signalled) and removes the state.
Single nodes can be stopped, paused (SIGSTOP), resumed, killed with SIGKILL and
restarted on the same port: the lab's faults are built from these.

Every server runs in its own session, so a signal reaches its whole process
group (PostgreSQL's backends die with their postmaster).

PostgreSQL, ZooKeeper and etcd can run TLS only (`tls="server"`, or `"mutual"` to
require a client certificate), with certificates from one throwaway CA per
cluster in DIR/tls; their URLs then carry the TLS parameters a client needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fencegate.cli import termination_held
from fencegate.lab.cluster.certs import Authority, KeyPair
from fencegate.lab.cluster.errors import ClusterArgumentError, ClusterError, ServerStartError
from fencegate.lab.cluster.seaweed import bucket_ready, s3_node
from fencegate.lab.cluster.seaweed import endpoint as s3_endpoint
from fencegate.lab.cluster.servers import (
    HOST,
    TLS_MODES,
    EtcdPeer,
    Node,
    RedisTLS,
    ServerTLS,
    ZooKeeperPeer,
    etcd_is_leader,
    etcd_node,
    free_port,
    postgres_node,
    probe,
    redis_node,
    zookeeper_node,
    zookeeper_url,
)
from fencegate.lab.cluster.topology import HAPROXY_CFG, gateway_backends, gateway_node, haproxy_node

STATE_FILE = "cluster.json"
START_DEADLINE = 60.0  # a cold JVM on a loaded 2-core machine takes tens of seconds
STOP_DEADLINE = 15.0
# weed's volume server has flushed and stopped within 0.1 s of SIGTERM, but its master, filer and S3
# gateway then wait 15 s on their gRPC streams: past this grace the rest is SIGKILLed
STOP_GRACE = {"s3": 2.0}
POLL = 0.02
START_ATTEMPTS = 3  # a free port can be taken between probe and bind
TLS_USER = "fencegate"  # the ACL user of TLS masters started with `ClusterSpec(redis_tls=True)`
TLS_DIR = "tls"
# the client certificate's name per kind: PostgreSQL's clientcert=verify-full wants the role's name
CLIENT_NAMES = {"postgres": "postgres", "zookeeper": "fencegate-client", "etcd": "fencegate-client"}


@dataclass(frozen=True)
class ClusterSpec:
    """What to start: N redis masters, optionally ZooKeeper and PostgreSQL, etcd, and gateways behind
    HAProxy.

    With `redis_tls` the masters are set up as a careful deployment runs them:
    TLS only, a client certificate required, and one ACL user (the default
    user off); each URL carries what a client needs (`rediss://user:pass@...
    ?ssl_ca_certs=...&ssl_certfile=...&ssl_keyfile=...`). With `zookeeper_tls`,
    `postgres_tls` or `etcd_tls` ("server" or "mutual") those run over TLS only too.
    """

    redis: int = 5
    redis_tls: bool = False
    zookeeper: bool = False
    zookeeper_ensemble: int = 0  # > 0: an ensemble of this many members instead of one standalone
    postgres: bool = False
    etcd: int = 0  # > 0: an etcd cluster of this many members
    aof: bool = False
    gateways: int = 0  # > 0: this many `fencegate serve` replicas behind one HAProxy, started last
    postgres_tls: str | None = None  # "server" | "mutual": PostgreSQL over TLS only (implies postgres)
    zookeeper_tls: str | None = None  # "server" | "mutual": ZooKeeper's secure client port only
    etcd_tls: str | None = (
        None  # "server" | "mutual": etcd's client URLs https only (implies etcd=1 at least)
    )
    s3: bool = False  # a SeaweedFS S3 store (`weed server -s3`) with one signing identity and a bucket


def _tail(path: str, lines: int = 20) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _runs(pid: int, binary: str) -> bool:
    """True if `pid` is alive and still runs `binary` (guards against PID reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    # redis-server rewrites its title to "path host:port", so compare the first word's name
    first = cmdline[0].decode(errors="replace").split(" ")[0] if cmdline else ""
    return _alive(pid) and os.path.basename(first) == os.path.basename(binary)


def _descendants(root: int) -> list[int]:
    """Every live descendant of `root`: PostgreSQL backends run in sessions of their own,
    so a signal to the postmaster's group would miss them."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _pg_user() -> str | None:
    """initdb refuses root: when we are root, PostgreSQL runs as `postgres`."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise ClusterError(
            "running as root, PostgreSQL needs the `postgres` user: `apt-get install postgresql` creates it"
        ) from exc
    return "postgres"


class LocalCluster:
    """Real servers on loopback; one owner, one way out (`stop_all`)."""

    def __init__(self, state_dir: Path | str | None = None) -> None:
        self.dir = Path(state_dir or tempfile.mkdtemp(prefix="fencegate-cluster-")).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.nodes: dict[str, Node] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._extra_dirs: list[str] = []
        self._authority: Authority | None = None
        self._client_certificate: KeyPair | None = None
        self._tls_login: tuple[str, str] | None = None
        self._clients: dict[str, KeyPair] = {}
        # Faults call in from threads (`asyncio.to_thread`), on several nodes at once: a node's start,
        # signals, stop and reaping run under its own lock, so a restart never interleaves with the
        # kill still being recorded; the node table and the state file are changed under one more.
        self._locks: dict[str, threading.RLock] = {}
        self._state = threading.Lock()

    # -- reading the cluster ------------------------------------------------

    @property
    def redis_urls(self) -> list[str]:
        return [n.url for n in self.nodes.values() if n.kind == "redis"]

    @property
    def zookeeper(self) -> str:
        """The ZooKeeper connect string: every member, comma-separated."""
        self._one("zookeeper")
        return ",".join(n.address for n in self.nodes.values() if n.kind == "zookeeper")

    @property
    def zookeeper_url(self) -> str:
        """The ZooKeeper token source URL: `zookeeper://`, every member, and the TLS parameters if any."""
        self._one("zookeeper")
        return zookeeper_url([n for n in self.nodes.values() if n.kind == "zookeeper"])

    @property
    def postgres_dsn(self) -> str:
        """The PostgreSQL URL (superuser `postgres`), with libpq's TLS parameters when it runs TLS."""
        return self._one("postgres").url

    @property
    def authority(self) -> Authority:
        """This cluster's throwaway CA (made on first use, in DIR/tls): it signs every TLS certificate."""
        if self._authority is None:
            self._authority = Authority(self.dir / TLS_DIR)
        return self._authority

    @property
    def etcd(self) -> str:
        """The etcd token source URL: `etcd://`, every member's client address, and the TLS parameters if
        any."""
        self._one("etcd")
        members = [n for n in self.nodes.values() if n.kind == "etcd"]
        return "etcd://" + ",".join(n.address for n in members) + members[0].query

    def etcd_leader(self) -> str:
        """The name of the etcd member that is the leader now (a running one that says so)."""
        for node in self.nodes.values():
            if node.kind == "etcd" and self.is_running(node.name) and etcd_is_leader(node):
                return node.name
        raise ClusterError("no running etcd member is the leader (no quorum, or an election under way)")

    @property
    def gateway_urls(self) -> list[str]:
        return [n.url for n in self.nodes.values() if n.kind == "gateway"]

    @property
    def load_balancer(self) -> str:
        """The URL clients use: HAProxy in front of every gateway replica."""
        return self._one("haproxy").url

    @property
    def s3(self) -> dict[str, str]:
        """The S3 store: `endpoint`, `access_key`, `secret_key`, `bucket` (made at start), `region`."""
        return s3_endpoint(self._one("s3"))

    def postgres_pids(self) -> list[int]:
        """The postmaster and every process under it (backends, WAL writer): what PostgreSQL's CPU is."""
        root = self._one("postgres").pid
        return [] if root is None else [root, *_descendants(root)]

    def _one(self, kind: str) -> Node:
        for node in self.nodes.values():
            if node.kind == kind:
                return node
        option = {"haproxy": "--gateways N (a load balancer in front of them)"}.get(kind, f"--{kind}")
        raise ClusterError(f"this cluster has no {kind}; start it with `fencegate cluster up {option}`")

    def endpoints(self) -> dict[str, Any]:
        """The JSON-able summary printed by `fencegate cluster up`: every endpoint as a URL."""
        kinds = {n.kind for n in self.nodes.values()}
        return {
            "dir": str(self.dir),
            "redis": self.redis_urls,
            "zookeeper": self.zookeeper_url if "zookeeper" in kinds else None,
            "postgres": self.postgres_dsn if "postgres" in kinds else None,
            "etcd": self.etcd if "etcd" in kinds else None,
            "gateways": self.gateway_urls,
            "load_balancer": self.load_balancer if "haproxy" in kinds else None,
            "s3": self.s3 if "s3" in kinds else None,
            "pids": {name: node.pid for name, node in self.nodes.items()},
        }

    # -- starting -----------------------------------------------------------

    def up(self, spec: ClusterSpec) -> LocalCluster:
        """Start everything in `spec` at once, then wait for all of it."""
        login = self.tls_login if spec.redis_tls else None
        names = [
            self.add_redis(aof=spec.aof, tls=spec.redis_tls, login=login, wait=False).name
            for _ in range(spec.redis)
        ]
        zookeeper_tls = spec.zookeeper_tls
        if spec.zookeeper_ensemble:
            members = self.add_zookeeper_ensemble(spec.zookeeper_ensemble, tls=zookeeper_tls, wait=False)
            names += [n.name for n in members]
        elif spec.zookeeper or zookeeper_tls:
            names.append(self.add_zookeeper(tls=zookeeper_tls, wait=False).name)
        if spec.postgres or spec.postgres_tls:
            names.append(self.add_postgres(tls=spec.postgres_tls, wait=False).name)
        if spec.etcd or spec.etcd_tls:
            members = self.add_etcd_cluster(spec.etcd or 1, tls=spec.etcd_tls, wait=False)
            names += [n.name for n in members]
        if spec.s3:
            names.append(self.add_s3(wait=False).name)
        for name in names:
            self.wait_ready(name)
        if spec.gateways:
            self.add_gateways(spec.gateways)
        return self

    def add_redis(
        self, *, aof: bool = False, args: tuple[str, ...] = (), env: dict[str, str] | None = None,
        tls: bool | RedisTLS = False, login: tuple[str, str] | None = None, wait: bool = True,
    ) -> Node:  # fmt: skip
        """Start one more redis-server master (extra `args` and `env`, e.g. LD_PRELOAD).

        `tls=True`: TLS only, with a certificate of its own from this cluster's
        CA, requiring the cluster's client certificate; or exactly the
        certificates of a `RedisTLS`. `login`: its one ACL user and password.
        """
        name = self._name("redis")
        if tls is True:
            tls = self.redis_tls(name)
        node = redis_node(
            name, self._node_dir(name), aof=aof, args=args, tls=tls or None, login=login
        )  # fmt: skip
        node.env = dict(env or {})
        return self._launch(node, wait)

    # -- TLS ------------------------------------------------------------------

    @property
    def client_certificate(self) -> KeyPair:
        """The client certificate TLS masters of this cluster require, signed by its CA."""
        if self._client_certificate is None:
            self._client_certificate = self.authority.issue("client", server=False, client=True)
        return self._client_certificate

    @property
    def tls_login(self) -> tuple[str, str]:
        """The ACL user and password of `ClusterSpec(redis_tls=True)` masters (a fresh password)."""
        if self._tls_login is None:
            self._tls_login = (TLS_USER, secrets.token_hex(12))
        return self._tls_login

    def redis_tls(
        self, name: str, *, hosts: tuple[str, ...] = (HOST, "localhost"), expired: bool = False
    ) -> RedisTLS:
        """Certificates for a TLS master named `name`: its own from this cluster's CA (for `hosts`,
        `expired` if asked), requiring the cluster's client certificate."""
        server = self.authority.issue(name, hosts=hosts, expired=expired)
        return RedisTLS(ca=self.authority.cert, server=server, client=self.client_certificate)

    def add_zookeeper(self, *, tls: str | None = None, wait: bool = True) -> Node:
        """Start a standalone ZooKeeper; with `tls` ("server" or "mutual"), on a secure client port only."""
        name = self._name("zookeeper")
        server_tls = self._server_tls(name, "zookeeper", tls)
        return self._launch(zookeeper_node(name, self._node_dir(name), tls=server_tls), wait)

    def add_zookeeper_ensemble(
        self, size: int = 3, *, tls: str | None = None, wait: bool = True
    ) -> list[Node]:
        """Start `size` ZooKeeper members that form one quorum (ready once a leader is elected)."""
        if size < 1:
            raise ClusterError(f"a ZooKeeper ensemble needs at least 1 member, not {size}")
        peers = tuple(ZooKeeperPeer(i + 1, free_port(), free_port()) for i in range(size))
        nodes = []
        for peer in peers:
            name = self._name("zookeeper")
            server_tls = self._server_tls(name, "zookeeper", tls)
            node = zookeeper_node(name, self._node_dir(name), peers=peers, myid=peer.myid, tls=server_tls)
            with self._state:
                self.nodes[name] = node  # recorded before the next member is named
            nodes.append(node)
        return self._launch_members(nodes, wait)

    def add_etcd_cluster(self, size: int = 3, *, tls: str | None = None, wait: bool = True) -> list[Node]:
        """Start `size` etcd members that form one cluster (ready once each is part of a quorum); with
        `tls` ("server" or "mutual"), clients reach them over TLS only."""
        if size < 1:
            raise ClusterError(f"an etcd cluster needs at least 1 member, not {size}")
        first = sum(1 for n in self.nodes.values() if n.kind == "etcd")
        peers = tuple(EtcdPeer(f"etcd-{first + i}", free_port(), free_port()) for i in range(size))
        token = f"fencegate-{os.getpid()}-{peers[0].peer_port}"  # one cluster's members never join another
        nodes = [
            etcd_node(
                p.name, self._node_dir(p.name), peers=peers, me=p, token=token,
                tls=self._server_tls(p.name, "etcd", tls),
            )
            for p in peers
        ]  # fmt: skip
        return self._launch_members(nodes, wait)

    def add_postgres(self, *, tls: str | None = None, wait: bool = True) -> Node:
        """Start a throwaway PostgreSQL; with `tls` ("server" or "mutual"), TLS only."""
        name = self._name("postgres")
        server_tls = self._server_tls(name, "postgres", tls)
        user = _pg_user()
        if user is None:
            data_dir = self._node_dir(name)
        else:  # the postgres user must be able to reach its data dir
            data_dir = Path(tempfile.mkdtemp(prefix="fencegate-pg-"))
            self._extra_dirs.append(str(data_dir))
            shutil.chown(data_dir, user, user)
        return self._launch(postgres_node(name, data_dir, user=user, tls=server_tls), wait)

    def add_s3(self, *, wait: bool = True) -> Node:
        """Start a SeaweedFS S3 store; ready once its bucket exists (see `fencegate.lab.cluster.seaweed`)."""
        name = self._name("s3")
        return self._launch(s3_node(name, self._node_dir(name)), wait)

    def _server_tls(self, name: str, kind: str, mode: str | None) -> ServerTLS | None:
        """Certificates for the TLS server `name` (valid for 127.0.0.1 only), or None for plaintext."""
        if mode is None:
            return None
        if mode not in TLS_MODES:
            raise ClusterError(f"TLS mode {mode!r} is not one of {', '.join(TLS_MODES)}")
        client = CLIENT_NAMES[kind]
        if client not in self._clients:
            self._clients[client] = self.authority.issue(client, hosts=(), server=False, client=True)
        server = self.authority.issue(f"{name}-server", hosts=(HOST,))
        return ServerTLS(self.authority.cert, server, self._clients[client], mutual=mode == "mutual")

    def add_gateways(self, count: int) -> list[Node]:
        """`count` gateway replicas on this cluster's storage and tokens, then HAProxy in front."""
        if count < 1:
            raise ClusterError(f"the load balancer needs at least 1 gateway behind it, not {count}")
        storage, tokens = gateway_backends(self.dir, self.nodes.values())
        gateways = []
        for _ in range(count):
            name = self._name("gateway")
            node = gateway_node(name, self._node_dir(name), storage=storage, tokens=tokens)
            gateways.append(self._launch(node, wait=False))
        for node in gateways:
            self.wait_ready(node.name)
        name = self._name("haproxy")
        self._launch(haproxy_node(name, self._node_dir(name), gateways), wait=True)
        return gateways

    def _name(self, kind: str) -> str:
        index = sum(1 for n in self.nodes.values() if n.kind == kind)
        return f"{kind}-{index}"

    def _node_dir(self, name: str) -> Path:
        path = self.dir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _launch_members(self, nodes: list[Node], wait: bool) -> list[Node]:
        """Start every member of one quorum before waiting for any: a member is ready only with the others."""
        for node in nodes:
            self._launch(node, wait=False)
        if wait:
            for node in nodes:
                self.wait_ready(node.name)
        return nodes

    def _lock(self, name: str) -> threading.RLock:
        return self._locks.setdefault(name, threading.RLock())

    def _launch(self, node: Node, wait: bool) -> Node:
        with self._state:
            self.nodes[node.name] = node
        with self._lock(node.name):
            self._spawn(node)
            if wait:
                self.wait_ready(node.name)
        return node

    def _spawn(self, node: Node) -> None:
        with termination_held(), open(node.log, "ab") as log:  # a server is recorded before SIGTERM acts
            proc = subprocess.Popen(
                node.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **node.env},
                user=node.user,
                group=node.user,
                cwd=node.data_dir,
            )
            self._procs[node.name] = proc
            node.pid = proc.pid
        self._save()

    def wait_ready(self, name: str, deadline: float = START_DEADLINE) -> None:
        """Wait until `name` answers; on a lost port race, retry on a new port."""
        with self._lock(name):
            self._wait_ready(self.nodes[name], deadline)

    def _wait_ready(self, node: Node, deadline: float) -> None:
        name = node.name
        for attempt in range(START_ATTEMPTS):
            end = time.monotonic() + deadline
            while time.monotonic() < end:
                if bucket_ready(node) if node.kind == "s3" else probe(node):  # a store: its bucket
                    return
                proc = self._procs.get(name)
                if proc is not None and proc.poll() is not None:
                    break
                time.sleep(POLL)
            else:
                raise ServerStartError(
                    f"no answer on port {node.port} within {deadline:.0f}s", name=name, log=_tail(node.log)
                )
            log = _tail(node.log)
            if "in use" not in log or attempt == START_ATTEMPTS - 1:
                raise ServerStartError("exited during start", name=name, log=log)
            self._respawn_on_new_port(node)

    def _respawn_on_new_port(self, node: Node) -> None:
        old = str(node.port)
        node.port = free_port()
        node.argv = [str(node.port) if arg == old else arg for arg in node.argv]
        node.env = {key: str(node.port) if value == old else value for key, value in node.env.items()}
        if node.kind == "zookeeper":
            cfg = Path(node.data_dir) / "conf" / "zoo.cfg"
            cfg.write_text(cfg.read_text().replace(f"clientPort={old}", f"clientPort={node.port}"))
        if node.kind == "etcd":  # the client port sits inside the listen and advertise URLs
            node.argv = [arg.replace(f"{HOST}:{old}", node.address) for arg in node.argv]
        if node.kind == "haproxy":
            cfg = Path(node.data_dir) / HAPROXY_CFG
            cfg.write_text(cfg.read_text().replace(f"bind {HOST}:{old}", f"bind {node.address}"))
        self._spawn(node)

    # -- faults -------------------------------------------------------------

    def _signal(self, name: str, sig: signal.Signals) -> None:
        with self._lock(name):
            node = self.nodes[name]
            if node.pid is None or not self.is_running(name):
                raise ClusterError(f"{name} is not running")
            for pid in [node.pid, *_descendants(node.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

    def pause(self, name: str) -> None:
        """SIGSTOP the server and its children: it hangs, its sockets stay open (hung, not dead).

        Twice: the second pass lists the children of a server that can no longer fork, so it
        reaches one forked (a PostgreSQL backend for a new connection) while the first ran.
        """
        self._signal(name, signal.SIGSTOP)
        self._signal(name, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self._signal(name, signal.SIGCONT)

    def kill(self, name: str) -> None:
        """SIGKILL the server and every process it started, no shutdown work: a crash."""
        with self._lock(name):
            self._signal(name, signal.SIGKILL)
            self._reap(name)

    def stop(self, name: str) -> None:
        """Orderly stop (SIGTERM; SIGINT for PostgreSQL's fast shutdown), SIGKILL past the deadline."""
        with self._lock(name):
            node = self.nodes[name]
            if node.pid is None or not self.is_running(name):
                node.pid = None
                return
            self._signal(name, signal.SIGCONT)  # a paused server cannot handle SIGTERM
            os.killpg(node.pid, signal.SIGINT if node.kind == "postgres" else signal.SIGTERM)
            if not self._wait_gone(node.pid, STOP_GRACE.get(node.kind, STOP_DEADLINE)):
                with contextlib.suppress(ClusterError):  # it may exit between the wait and the kill
                    self._signal(name, signal.SIGKILL)
            self._reap(name)

    def restart(self, name: str, *, env: dict[str, str] | None = None) -> Node:
        """Start a stopped or killed node again on the same port and data dir."""
        with self._lock(name):
            node = self.nodes[name]
            if node.pid is not None and _alive(node.pid):
                self.kill(name)
            if env is not None:
                node.env = dict(env)
            self._spawn(node)
            self._wait_ready(node, START_DEADLINE)
        return node

    def restart_all(self, kind: str) -> list[Node]:
        """Kill every node of `kind` that still runs, start them all again with their data, then wait.

        The members of a quorum (ZooKeeper, etcd) are started together: none of
        them is ready alone, so restarting them one by one would never finish.
        """
        nodes = [n for n in self.nodes.values() if n.kind == kind]
        if not nodes:
            raise ClusterError(f"this cluster has no {kind}")
        for node in nodes:
            with self._lock(node.name):
                if node.pid is not None and _alive(node.pid):
                    self.kill(node.name)
        for node in nodes:
            with self._lock(node.name):
                self._spawn(node)
        for node in nodes:
            self.wait_ready(node.name)
        return nodes

    def is_running(self, name: str) -> bool:
        """Its process runs: our own unreaped child (never a reused PID; one just started may still be
        exec'ing, its command line not yet readable), or a PID whose command line is the node's."""
        node = self.nodes[name]
        proc = self._procs.get(name)
        if proc is not None and proc.pid == node.pid and proc.poll() is None:
            return True
        return node.pid is not None and _runs(node.pid, node.argv[0])

    def _wait_gone(self, pid: int, deadline: float) -> bool:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            proc = next((p for p in self._procs.values() if p.pid == pid), None)
            if proc is not None:
                proc.poll()
            if not _alive(pid):
                return True
            time.sleep(POLL)
        return False

    def _reap(self, name: str) -> None:
        with self._lock(name):
            node = self.nodes[name]
            proc = self._procs.pop(name, None)
            if proc is not None:
                proc.wait(timeout=STOP_DEADLINE)
            elif node.pid is not None:
                self._wait_gone(node.pid, STOP_DEADLINE)
            node.pid = None
            self._save()

    # -- stopping everything --------------------------------------------------

    def stop_all(self, *, remove: bool = True) -> None:
        """Stop every node this cluster started, then remove its state."""
        for name in reversed(list(self.nodes)):
            self.stop(name)
        if remove:
            for path in [*self._extra_dirs, str(self.dir)]:
                shutil.rmtree(path, ignore_errors=True)

    # -- the state file -------------------------------------------------------

    def _save(self) -> None:
        with self._state:  # one writer of the file at a time, each writing the table as it is then
            state = {"nodes": [asdict(n) for n in self.nodes.values()], "extra_dirs": self._extra_dirs}
            tmp = self.dir / (STATE_FILE + ".tmp")
            tmp.write_text(json.dumps(state, indent=2))
            tmp.replace(self.dir / STATE_FILE)

    @classmethod
    def attach(cls, state_dir: Path | str) -> LocalCluster:
        """The cluster recorded in `state_dir` (started by another process)."""
        path = Path(state_dir) / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError as exc:
            raise ClusterArgumentError(
                f"no cluster state at {path}: start one with `fencegate cluster up`, or give its --dir"
            ) from exc
        except (OSError, ValueError) as exc:
            raise ClusterArgumentError(f"cannot read the cluster state {path}: {exc}") from exc
        cluster = cls(state_dir)
        try:
            cluster.nodes = {n["name"]: Node(**n) for n in state["nodes"]}
            cluster._extra_dirs = [str(d) for d in state.get("extra_dirs", [])]
        except (TypeError, KeyError, AttributeError) as exc:
            raise ClusterArgumentError(
                f"{path} is not a cluster state written by `fencegate cluster up` ({type(exc).__name__}: "
                f"{exc}); stop its servers by hand, remove it, and start again"
            ) from exc
        return cluster

    # -- context managers -----------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def running(cls, spec: ClusterSpec, state_dir: Path | str | None = None) -> Iterator[LocalCluster]:
        """Start `spec`, yield the cluster, stop it whatever happened."""
        cluster = cls(state_dir)
        try:
            yield cluster.up(spec)
        finally:
            cluster.stop_all()

    @classmethod
    @contextlib.asynccontextmanager
    async def running_async(
        cls, spec: ClusterSpec, state_dir: Path | str | None = None
    ) -> AsyncIterator[LocalCluster]:
        """`running` for asyncio code: starting and stopping happen off the event loop."""
        import asyncio

        cluster = cls(state_dir)
        try:
            yield await asyncio.to_thread(cluster.up, spec)
        finally:
            await asyncio.shield(asyncio.to_thread(cluster.stop_all))
