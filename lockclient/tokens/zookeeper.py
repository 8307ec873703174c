"""Fencing tokens from ZooKeeper: the zxid of a write to the resource's znode.

Every ZooKeeper write gets a zxid from the leader, totally ordered across the
ensemble and across leader changes (the epoch is the high 32 bits). `set` on
`/fencegate/tokens/<resource>` returns the znode's new `mzxid`: later writes
have larger zxids, so tokens strictly increase, and the znode's current mzxid
bounds every token issued for it. Tokens survive a ZooKeeper restart as long
as its data directory (the transaction log) survives; a wiped ensemble starts
again low, which the gateway reports as `token_source_regressed`.

This is the only module that imports kazoo. Kazoo blocks on its own threads,
so every call runs on this source's own small thread pool; the event loop never
waits on it, and a ZooKeeper outage (calls blocked in retries until their
deadline) cannot starve the loop's default executor that the rest of the
process shares.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import quote

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KeeperState
from kazoo.retry import ForceRetryError, KazooRetry

from lockclient.errors import ConfigurationError
from lockclient.tokens._base import ClosingSource, check_resource, map_errors

__all__ = ["DEFAULT_ROOT", "ZooKeeperTokens"]

T = TypeVar("T")

DEFAULT_ROOT = "/fencegate/tokens"
DEFAULT_TIMEOUT = 10.0  # seconds to connect, and for one token across reconnects
WORKERS = 16  # kazoo calls in flight at once; each holds a thread until its answer or deadline
FIX = "check that ZooKeeper is running and reachable at the given hosts"


def znode_name(resource: str) -> str:
    """Any resource name as one znode name ('/' and '%' escaped; '.' and '..' are reserved)."""
    name = quote(resource, safe="")
    return name.replace(".", "%2E") if name in (".", "..") else name


class ZooKeeperTokens(ClosingSource):
    """Tokens that are ZooKeeper zxids; connects on first use and reconnects by itself."""

    def __init__(
        self, hosts: str, *, chroot: str = "", root: str = DEFAULT_ROOT, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        if not hosts or "/" in hosts:
            raise ConfigurationError(
                f"hosts must be 'host:port[,host:port...]' without a path, got {hosts!r}: pass chroot="
            )
        if chroot and not chroot.startswith("/"):
            raise ConfigurationError(f"chroot must start with '/', got {chroot!r}")
        if not root.startswith("/") or root.endswith("/"):
            raise ConfigurationError(
                f"root must be an absolute znode path like /fencegate/tokens, got {root!r}"
            )
        self.hosts = hosts
        self.chroot = chroot
        self.root = root
        self.timeout = timeout
        self._client: Any = None  # KazooClient once started (kazoo is untyped)
        self._start_lock = asyncio.Lock()
        self._revive_lock = threading.Lock()  # kazoo calls run on worker threads
        self._pool: ThreadPoolExecutor | None = None  # made on first use, again after aclose

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking kazoo call on this source's pool."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="fencegate-zookeeper")
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))

    async def _started(self) -> Any:
        async with self._start_lock:
            if self._client is None:
                # the chroot is applied as a path prefix rather than by kazoo, which cannot create it
                client = KazooClient(
                    hosts=self.hosts,
                    timeout=self.timeout,
                    connection_retry={"max_tries": -1, "max_delay": 1.0},
                )
                try:
                    await self._blocking(client.start, self.timeout)
                except BaseException:
                    await self._blocking(client.stop)
                    await self._blocking(client.close)
                    raise
                self._client = client
        return self._client

    def _retrying(self, client: KazooClient, call: Callable[[], T]) -> T:
        """Retry through connection loss and session expiry (a ZooKeeper restart) until the deadline."""

        def attempt() -> T:
            if client.client_state == KeeperState.CLOSED:
                self._revive(client)
            try:
                return call()
            except ConnectionClosedError as exc:  # KazooRetry gives up on this one; we revive instead
                raise ForceRetryError(str(exc)) from exc

        retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5, deadline=self.timeout)
        result: T = retry(attempt)
        return result

    def _revive(self, client: KazooClient) -> None:
        """kazoo's connection loop can give up during a long outage (a slow restart after the session
        expired), leaving the client closed for good; start it again, once, whichever thread sees it."""
        with self._revive_lock:
            if client.client_state == KeeperState.CLOSED and self._client is client:
                client.stop()
                client.start(self.timeout)

    def _set(self, client: KazooClient, path: str) -> int:
        def write() -> int:
            try:
                return int(client.set(path, b"").mzxid)
            except NoNodeError:
                client.ensure_path(path)
                return int(client.set(path, b"").mzxid)

        return self._retrying(client, write)

    def _bound(self, client: KazooClient, path: str) -> int:
        def read() -> Any:
            # ZooKeeper reads are not linearizable: the member this session talks to may not have
            # applied a token just issued through another member. `sync` makes it catch up first.
            client.sync(path)
            return client.exists(path)

        stat = self._retrying(client, read)
        return 0 if stat is None else int(stat.mzxid)

    async def _call(self, doing: str, op: Callable[[KazooClient, str], int], resource: str) -> int:
        path = f"{self.chroot}{self.root}/{znode_name(check_resource(resource))}"
        with map_errors("zookeeper", doing, KazooException, KazooTimeoutError, OSError, fix=FIX):
            client = await self._started()
            return await self._blocking(op, client, path)

    async def next_token(self, resource: str) -> int:
        return await self._call("issue a token", self._set, resource)

    async def upper_bound(self, resource: str) -> int:
        return await self._call("read the highest token", self._bound, resource)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await self._blocking(client.stop)
            await self._blocking(client.close)
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"ZooKeeperTokens({self.hosts + self.chroot!r})"
