"""The servers and settings every benchmark shares in one `fencegate bench` run."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import open_token_source
from lockclient.protocols import TokenSource

MAX_MASTERS = 7
ETCD_MEMBERS = 3


@dataclass
class BenchEnv:
    """A cluster of 7 masters, ZooKeeper, PostgreSQL and 3 etcd members, and the run's sizes."""

    cluster: LocalCluster
    workdir: Path
    runs: int
    ops: int
    seconds: float
    quiet: bool = False

    @property
    def redis_urls(self) -> list[str]:
        """The plaintext masters."""
        return [n.url for n in self.cluster.nodes.values() if n.kind == "redis" and not n.tls]

    async def tls_redis_urls(self, count: int) -> list[str]:
        """`count` TLS-only masters (a client certificate, an ACL user), started on first use."""
        urls = [n.url for n in self.cluster.nodes.values() if n.kind == "redis" and n.tls]
        while len(urls) < count:
            node = await asyncio.to_thread(self.cluster.add_redis, tls=True, login=self.cluster.tls_login)
            urls.append(node.url)
        return urls[:count]

    def token_url(self, kind: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{self.workdir / 'tokens.db'}"
        if kind == "postgres":
            return self.cluster.postgres_dsn
        if kind == "zookeeper":
            return f"zookeeper://{self.cluster.zookeeper}"
        if kind == "etcd":
            return self.cluster.etcd
        raise ValueError(f"unknown token source kind {kind!r}: use sqlite, postgres, zookeeper or etcd")

    def tokens(self, kind: str) -> TokenSource:
        return open_token_source(self.token_url(kind))

    def progress(self, message: str) -> None:
        if not self.quiet:
            print(f"  {message}", file=sys.stderr, flush=True)


@contextlib.asynccontextmanager
async def bench_env(*, quick: bool, quiet: bool = False, smoke: bool = False) -> AsyncIterator[BenchEnv]:
    """Start the servers once for the whole run; stop them whatever happens.

    `smoke` is the tests' size: one tiny run per case, numbers without meaning.
    """
    spec = ClusterSpec(redis=MAX_MASTERS, zookeeper=True, postgres=True, etcd=ETCD_MEMBERS)
    with tempfile.TemporaryDirectory(prefix="fencegate-bench-") as workdir:
        async with LocalCluster.running_async(spec, Path(workdir) / "cluster") as cluster:
            if smoke:
                yield BenchEnv(cluster, Path(workdir), runs=1, ops=10, seconds=0.3, quiet=quiet)
            elif quick:
                yield BenchEnv(cluster, Path(workdir), runs=2, ops=30, seconds=0.5, quiet=quiet)
            else:
                yield BenchEnv(cluster, Path(workdir), runs=5, ops=1000, seconds=5.0, quiet=quiet)
