"""Node faults over the local cluster, as the seed documents describe them.

- `paused(cluster, name)`: SIGSTOP a server, SIGCONT on exit (a hung node).
- `crash_restart(cluster, name, down_for=0)`: SIGKILL, then start it again on
  the same port without persistence: it comes back empty (antirez's restart
  case). With `down_for` longer than the TTL it is the Redlock page's delayed
  restart, which keeps the node out until every lease it knew has expired.
- `ReplicatedPair`: a master with an asynchronous replica that replicates
  through a `DelayProxy`; `lag()` holds the replication stream in the proxy so
  writes do not reach the replica, `fail_over()` kills the master, drops what
  the proxy held and promotes the replica with `REPLICAOF NO ONE`:
  acknowledged keys are lost. (Pausing the replica would not do: the bytes
  the master sent wait in the replica's socket buffer and arrive on resume.)

Cluster calls block (they wait on processes), so they run in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from fencegate.lab.cluster import LocalCluster, Node
from fencegate.lab.errors import FaultError
from fencegate.lab.faults.proxy import DelayProxy

REPLICATION_DEADLINE = 10.0
POLL = 0.02
REPLICATION_HOLD = 3600.0  # held until the failover drops it


@contextlib.asynccontextmanager
async def paused(cluster: LocalCluster, name: str) -> AsyncIterator[None]:
    """The node is stopped (SIGSTOP) inside the block and resumed however the block ends."""
    await asyncio.to_thread(cluster.pause, name)
    try:
        yield
    finally:
        await asyncio.to_thread(cluster.resume, name)


async def crash_restart(cluster: LocalCluster, name: str, *, down_for: float = 0.0) -> Node:
    """SIGKILL `name`, keep it down `down_for` seconds, restart it empty on the same port."""
    if down_for < 0:
        raise FaultError(f"down_for={down_for}: a node cannot come back before it died; use >= 0")
    await asyncio.to_thread(cluster.kill, name)
    if down_for:
        await asyncio.sleep(down_for)  # the fault itself: the node stays out this long
    return await asyncio.to_thread(cluster.restart, name)


async def _replication(url: str) -> dict[str, Any]:
    async with aioredis.Redis.from_url(url, decode_responses=True, socket_timeout=1.0) as client:
        info: dict[str, Any] = await client.info("replication")
    return info


@dataclass(eq=False)
class ReplicatedPair:
    """A master and one asynchronous replica behind one stable address; close it with `aclose()`.

    Clients use `url`, a proxy that points at the master until `fail_over()`
    moves it to the promoted replica (a virtual IP, or Sentinel, in a real
    deployment): the same client configuration survives the failover.
    """

    cluster: LocalCluster
    master: Node
    replica: Node
    _: KW_ONLY
    link: DelayProxy  # the replication stream, master to replica
    service: DelayProxy  # the clients' stable address
    promoted: bool = field(default=False, init=False)

    @classmethod
    async def start(cls, cluster: LocalCluster) -> ReplicatedPair:
        """Start both and wait until the replica's link to the master is up."""
        # redis waits 5 s by default for more replicas before a diskless full sync; there is only one
        master = await asyncio.to_thread(cluster.add_redis, args=("--repl-diskless-sync-delay", "0"))
        link = await DelayProxy("127.0.0.1", master.port).start()
        service = await DelayProxy("127.0.0.1", master.port).start()
        try:
            args = ("--replicaof", "127.0.0.1", str(link.port))
            replica = await asyncio.to_thread(cluster.add_redis, args=args)
            pair = cls(cluster, master, replica, link=link, service=service)
            await pair._wait(lambda info: info.get("master_link_status") == "up", "the replica to sync")
        except BaseException:
            await link.aclose()
            await service.aclose()
            raise
        return pair

    @property
    def url(self) -> str:
        """The stable address clients use: the master, then the promoted replica."""
        return f"redis://127.0.0.1:{self.service.port}"

    async def lag(self) -> None:
        """Hold the replication stream: the master acknowledges writes the replica never gets."""
        self.link.hold(REPLICATION_HOLD, direction="down")

    async def fail_over(self) -> None:
        """Kill the master, drop the stream in flight, promote the replica, move the address to it."""
        await asyncio.to_thread(self.cluster.kill, self.master.name)
        await self.link.aclose()
        try:
            async with aioredis.Redis.from_url(self.replica.url, socket_timeout=1.0) as client:
                await client.replicaof("NO", "ONE")
        except RedisError as exc:
            raise FaultError(f"could not promote {self.replica.name}: {exc}") from exc
        await self._wait(lambda info: info.get("role") == "master", "the replica to become master")
        self.service.retarget("127.0.0.1", self.replica.port)
        await self.service.drop()  # connections to the dead master break; clients reconnect to the replica
        self.promoted = True

    async def aclose(self) -> None:
        await self.link.aclose()
        await self.service.aclose()

    async def _wait(self, done: Callable[[dict[str, Any]], bool], what: str) -> None:
        end = time.monotonic() + REPLICATION_DEADLINE
        while time.monotonic() < end:
            with contextlib.suppress(RedisError):
                if done(await _replication(self.replica.url)):
                    return
            await asyncio.sleep(POLL)
        raise FaultError(f"timed out after {REPLICATION_DEADLINE:.0f}s waiting for {what}")
