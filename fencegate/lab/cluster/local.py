"""A cluster of real servers on loopback, owned by one object.

`LocalCluster` starts redis-server masters, ZooKeeper, PostgreSQL, etcd, a SeaweedFS S3 store (and the
deployment's gateway replicas behind HAProxy, see `topology`) on free
ports, waits until each answers, and tells each one's URL. Its processes,
their faults and the state file are its `Supervisor`'s (`supervisor.py`);
each kind's command line is in `servers.py`, `seaweed.py` and `topology.py`.

PostgreSQL, ZooKeeper and etcd can run TLS only (`tls="server"`, or `"mutual"` to
require a client certificate), with certificates from one throwaway CA per
cluster in DIR/tls (`tls.py`); their URLs then carry the TLS parameters a client needs.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencegate.lab.cluster.certs import Authority, KeyPair
from fencegate.lab.cluster.errors import ClusterError
from fencegate.lab.cluster.probes import etcd_is_leader
from fencegate.lab.cluster.procfs import descendants
from fencegate.lab.cluster.seaweed import endpoint as s3_endpoint
from fencegate.lab.cluster.seaweed import s3_node
from fencegate.lab.cluster.servers import (
    HOST,
    EtcdPeer,
    Node,
    RedisTLS,
    ZooKeeperPeer,
    etcd_node,
    free_port,
    postgres_node,
    redis_node,
    zookeeper_node,
    zookeeper_url,
)
from fencegate.lab.cluster.statefile import read_state
from fencegate.lab.cluster.supervisor import Supervisor
from fencegate.lab.cluster.tls import ClusterTLS
from fencegate.lab.cluster.topology import gateway_backends, gateway_node, haproxy_node


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


class LocalCluster(Supervisor):
    """Real servers on loopback, by kind; the `Supervisor` it is runs, signals and records their
    processes, so there is one owner and one way out (`stop_all`)."""

    def __init__(self, state_dir: Path | str | None = None) -> None:
        super().__init__(state_dir)
        self._tls = ClusterTLS(self.dir)

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
        return self._tls.authority

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
        return [] if root is None else [root, *descendants(root)]

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
        return self._tls.client_certificate

    @property
    def tls_login(self) -> tuple[str, str]:
        """The ACL user and password of `ClusterSpec(redis_tls=True)` masters (a fresh password)."""
        return self._tls.login

    def redis_tls(
        self, name: str, *, hosts: tuple[str, ...] = (HOST, "localhost"), expired: bool = False
    ) -> RedisTLS:
        """Certificates for a TLS master named `name`: its own from this cluster's CA (for `hosts`,
        `expired` if asked), requiring the cluster's client certificate."""
        return self._tls.redis(name, hosts=hosts, expired=expired)

    # -- the other kinds ------------------------------------------------------

    def add_zookeeper(self, *, tls: str | None = None, wait: bool = True) -> Node:
        """Start a standalone ZooKeeper; with `tls` ("server" or "mutual"), on a secure client port only."""
        name = self._name("zookeeper")
        server_tls = self._tls.server(name, "zookeeper", tls)
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
            server_tls = self._tls.server(name, "zookeeper", tls)
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
                tls=self._tls.server(p.name, "etcd", tls),
            )
            for p in peers
        ]  # fmt: skip
        return self._launch_members(nodes, wait)

    def add_postgres(self, *, tls: str | None = None, wait: bool = True) -> Node:
        """Start a throwaway PostgreSQL; with `tls` ("server" or "mutual"), TLS only."""
        name = self._name("postgres")
        server_tls = self._tls.server(name, "postgres", tls)
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

    # -- another process's cluster, and context managers ---------------------

    @classmethod
    def attach(cls, state_dir: Path | str) -> LocalCluster:
        """The cluster recorded in `state_dir` (started by another process)."""
        nodes, extra_dirs = read_state(state_dir)
        cluster = cls(state_dir)
        cluster.nodes, cluster._extra_dirs = nodes, extra_dirs
        return cluster

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
