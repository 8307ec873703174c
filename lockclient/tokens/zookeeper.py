"""Fencing tokens from ZooKeeper: the zxid of a write to the resource's znode.

Every ZooKeeper write gets a zxid from the leader, totally ordered across the
ensemble and across leader changes (the epoch is the high 32 bits). `set` on
`/fencegate/tokens/<resource>` returns the znode's new `mzxid`: later writes
have larger zxids, so tokens strictly increase. The upper bound is the zxid of
a fresh write (to the tokens' root znode): writes are linearizable and zxids
global, so it is above every token the ensemble issued before it, for any
resource. A read would not do: a member's reads may lag the leader, and
`sync` does not make them current across a leader change (ZOOKEEPER-1675),
which would refuse an honest token as one from the future. Tokens survive a ZooKeeper restart as long
as its data directory (the transaction log) survives; a wiped ensemble starts
again low, which the gateway reports as `token_source_regressed` only while
its tokens are below the marks: one that climbs back to a mark is accepted
beside the old holder's, so move a wiped source past the highest mark before
clients draw again (docs/operations.md).

Draws waiting at the same moment share one multi-op transaction (`Batcher`),
one `set` per resource. Every op of a multi gets the same zxid, so a multi
never holds two draws for one resource: the later one goes in the next
request. Up to IN_FLIGHT requests are out at once (kazoo pipelines them on
its one connection), so draws for one resource still overlap.

Bounded: the first connection gives up after `connect_timeout`, a draw after
`timeout` (reconnects included), each with a `TokenSourceError`; a member that
accepts a connection and does not answer is left after `connect_timeout` too.
A worker thread never waits for kazoo longer than the draw's deadline (kazoo's
blocking calls wait without one, for ever on a hung member), and `aclose()`
gives the requests in flight `CLOSE_GRACE` seconds, then closes the client
under them (their draws fail with a `TokenSourceError`). kazoo's own
connection chatter ("Connection dropped", once per retry while ZooKeeper is
down) goes to the logger `lockclient.tokens.zookeeper.kazoo`, which passes on
only errors unless the application sets its level.

TLS (ZooKeeper's secure client port): kazoo's own settings, as keywords or in
the URL (`zookeeper://zk1:2281,zk2:2281/chroot?use_ssl=true&ca=ca.pem&certfile=
client.crt&keyfile=client.key`). Unlike kazoo's defaults, the CA given is the
only one trusted and the server's host name is checked (`check_hostname`);
a certificate, key or CA named without `use_ssl` is refused rather than
ignored, and a failed handshake is reported with its reason (kazoo itself
only retries it until the deadline). Never a plaintext retry.

This is the only module that imports kazoo (its settings are checked in
`_zookeeper_settings`, before kazoo sees them). Kazoo blocks on its own threads,
so every call runs on this source's own small thread pool; the event loop never
waits on it, and a ZooKeeper outage (calls blocked in retries until their
deadline) cannot starve the loop's default executor that the rest of the
process shares.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from lockclient.errors import ConfigurationError, TLSError, TokenSourceError
from lockclient.tls import explain
from lockclient.tokens._base import ClosingSource, check_resource, check_seconds, map_errors, missing_extra
from lockclient.tokens._batch import Batcher
from lockclient.tokens._zookeeper_settings import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_ROOT,
    DEFAULT_TIMEOUT,
    check_hosts,
    check_paths,
    tls_context,
    url_options,
    znode_name,
)

try:
    from kazoo.client import KazooClient
    from kazoo.exceptions import ConnectionClosedError, KazooException, NoNodeError
    from kazoo.handlers import utils as kazoo_utils
    from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
    from kazoo.protocol.states import KeeperState
    from kazoo.retry import ForceRetryError, KazooRetry
except ImportError as exc:
    raise missing_extra("ZooKeeper", "zookeeper", exc) from exc

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_ROOT",
    "DEFAULT_TIMEOUT",
    "KAZOO_LOG",
    "ZooKeeperTokens",
    "url_options",
]

T = TypeVar("T")

WORKERS = 16  # kazoo calls in flight at once; each holds a thread until its answer or deadline
IN_FLIGHT = 4  # token requests out at once; the rest of the draws wait to share the next ones
MAX_BATCH = 64  # resources in one multi at most
# how long aclose() lets the requests already sent finish before it closes the client under them
CLOSE_GRACE = 1.0
FIX = "check that ZooKeeper is running and reachable at the given hosts (a secure client port needs use_ssl)"
TLS_FIX = "check ca, certfile and keyfile against the server's secure client port"

log = logging.getLogger(__name__)
KAZOO_LOG = logging.getLogger(__name__ + ".kazoo")
if KAZOO_LOG.level == logging.NOTSET:  # an application that set a level keeps it
    KAZOO_LOG.setLevel(logging.ERROR)


class _Handler(SequentialThreadingHandler):  # type: ignore[misc] # kazoo is untyped
    """kazoo's threading handler with two changes.

    A member's answer is awaited at most `wait` seconds: kazoo waits for a
    connection and its handshake as long as the session timeout over the
    number of hosts, so one member that accepted the connection while
    starting up and never answered held a draw for its whole deadline (seen
    after a ZooKeeper restart). kazoo's own loop, which also watches its wake-up
    pipe, keeps its timing: its heartbeats say when a session is lost.

    With a TLS context, it connects with ours instead of kazoo's (which trusts
    the system's CAs beside the one given), made anew for each connection so
    renewed files are used, and remembers why the last handshake failed, since
    kazoo only logs that and retries.
    """

    def __init__(self, wait: float, context: Callable[[], ssl.SSLContext] | None) -> None:
        super().__init__()
        self._wait = wait
        self._context = context
        self.failure: str | None = None

    def select(
        self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
    ) -> Any:
        if len(rlist) + len(wlist) == 1:  # one member's socket alone: a connect, a handshake, a read
            timeout = self._wait if timeout is None else min(timeout, self._wait)
        return super().select(rlist, wlist, xlist, timeout)

    def create_connection(
        self,
        address: tuple[str, int],
        hostname: str | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> socket.socket:
        timeout = self._wait if timeout is None else min(timeout, self._wait)
        if self._context is None:
            plain: socket.socket = super().create_connection(
                address, hostname=hostname, timeout=timeout, **options
            )
            return plain
        sock = kazoo_utils.create_tcp_connection(socket, address, hostname=hostname, timeout=timeout)
        try:
            wrapped = self._context().wrap_socket(sock, server_hostname=hostname)
        except (ssl.SSLError, ConfigurationError) as exc:
            sock.close()
            server = f"{hostname}:{address[1]}"
            self.failure = f"{server}: {explain(exc, ca='ca', client='certfile and keyfile') or exc}"
            raise TLSError(self.failure, server=server) from exc  # a socket error: kazoo retries it
        self.failure = None  # kept until a handshake succeeds: a member that refuses TCP does not hide it
        return wrapped


class ZooKeeperTokens(ClosingSource):
    """Tokens that are ZooKeeper zxids; connects on first use and reconnects by itself."""

    def __init__(
        self,
        hosts: str,
        *,
        chroot: str = "",
        root: str = DEFAULT_ROOT,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        use_ssl: bool = False,
        ca: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        keyfile_password: str | None = None,
        verify_certs: bool = True,
        check_hostname: bool = True,
    ) -> None:
        """`use_ssl` and the rest are kazoo's TLS settings; see the module docstring."""
        check_hosts(hosts)
        check_paths(chroot, root)
        self.hosts = hosts
        self.chroot = chroot
        self.root = root
        check_seconds(timeout=timeout, connect_timeout=connect_timeout)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.use_ssl = use_ssl
        context = tls_context(
            use_ssl, ca=ca, certfile=certfile, keyfile=keyfile, keyfile_password=keyfile_password,
            verify_certs=verify_certs, check_hostname=check_hostname,
        )  # fmt: skip
        self._handler = _Handler(connect_timeout, context)
        self._batch = Batcher(self._issue, max_batch=MAX_BATCH, in_flight=IN_FLIGHT, distinct=True)
        self._client: Any = None  # KazooClient once started (kazoo is untyped)
        self._start_lock = asyncio.Lock()
        # kazoo's start, stop and close run on worker threads; one at a time, so a client is never
        # closed while another thread starts it (it would run on, or leak its sockets when dropped)
        self._lifecycle = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # made on first use, again after aclose

    def _workers(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="fencegate-zookeeper")
        return self._pool

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking kazoo call on this source's pool."""
        return await asyncio.get_running_loop().run_in_executor(self._workers(), functools.partial(fn, *args))

    async def _started(self) -> Any:
        async with self._start_lock:
            if self._client is None:
                # the chroot is applied as a path prefix rather than by kazoo, which cannot create it
                client = KazooClient(
                    hosts=self.hosts,
                    timeout=self.timeout,
                    connection_retry={"max_tries": -1, "max_delay": 1.0},
                    logger=KAZOO_LOG,
                    handler=self._handler,
                    use_ssl=self.use_ssl,
                )
                try:
                    await self._blocking(self._start, client)
                except BaseException as exc:
                    self._dispose_soon(client)
                    if isinstance(exc, KazooTimeoutError):
                        raise self._tls_failed() or TokenSourceError(
                            f"zookeeper token source could not connect to {self.hosts} within "
                            f"connect_timeout={self.connect_timeout:g} s; {FIX}",
                            source="zookeeper",
                        ) from exc
                    raise
                self._client = client
        return self._client

    def _tls_failed(self) -> TokenSourceError | None:
        """The error to raise if the last connection attempt failed its TLS handshake."""
        failure = self._handler.failure
        if failure is None:
            return None
        return TokenSourceError(
            f"zookeeper token source could not connect over TLS to {failure}; {TLS_FIX}", source="zookeeper"
        )

    def _retrying(self, client: KazooClient, call: Callable[[Callable[[Any], Any]], T]) -> T:
        """Retry through connection loss and session expiry (a ZooKeeper restart) until the deadline.

        `call` gets `answer`, which waits for one of kazoo's async results until the deadline at most
        (kazoo's blocking calls wait for ever while a member is hung), then raises KazooTimeoutError.
        """
        stop_at = time.monotonic() + self.timeout

        def answer(result: Any) -> Any:
            return result.get(timeout=max(0.0, stop_at - time.monotonic()))

        def attempt() -> T:
            if client.client_state == KeeperState.CLOSED:
                self._revive(client)
            try:
                return call(answer)
            except ConnectionClosedError as exc:  # KazooRetry gives up on this one; we revive instead
                if self._client is not client:  # closed by aclose(): nothing to revive
                    raise
                raise ForceRetryError(str(exc)) from exc

        retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5, deadline=self.timeout)
        result: T = retry(attempt)
        return result

    def _start(self, client: KazooClient) -> None:
        with self._lifecycle:
            client.start(self.connect_timeout)

    def _dispose(self, client: KazooClient) -> None:
        """Stop and close `client`: its session, its thread and its wake-up socket pair."""
        with self._lifecycle:
            try:
                client.stop()
                client.close()
            except Exception:  # the client is dropped either way; say so
                log.warning("a ZooKeeper client did not close cleanly", exc_info=True)

    def _dispose_soon(self, client: KazooClient) -> Future[None]:
        """`_dispose` on a worker thread, where no cancel stops it: a caller that gives up (its
        deadline, a second cancel) cannot leave the client started or unclosed. A start in progress
        ends first."""
        return self._workers().submit(self._dispose, client)

    def _revive(self, client: KazooClient) -> None:
        """kazoo's connection loop can give up during a long outage (a slow restart after the session
        expired), leaving the client closed for good; start it again, once, whichever thread sees it."""
        with self._lifecycle:
            if client.client_state == KeeperState.CLOSED and self._client is client:
                client.stop()
                try:
                    client.start(self.connect_timeout)
                except KazooTimeoutError as exc:  # the draw's deadline decides, not one attempt
                    raise ForceRetryError(str(exc)) from exc

    def _set(self, client: KazooClient, paths: Sequence[str]) -> list[int]:
        """One multi that writes every path (distinct, see the module docstring); each one's new mzxid."""

        def write(answer: Callable[[Any], Any]) -> list[int]:
            while True:
                transaction = client.transaction()
                for path in paths:
                    transaction.set_data(path, b"")
                results = answer(transaction.commit_async())
                missing = [path for path, r in zip(paths, results, strict=True) if isinstance(r, NoNodeError)]
                if not missing:
                    break
                for path in missing:  # a resource's first token: create its znode, then write them all
                    answer(client.ensure_path_async(path))
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                raise failed[0]
            return [int(stat.mzxid) for stat in results]

        return self._retrying(client, write)

    def _bound(self, client: KazooClient, root: str) -> int:
        def write(answer: Callable[[Any], Any]) -> Any:
            try:
                return answer(client.set_async(root, b""))
            except NoNodeError:
                answer(client.ensure_path_async(root))
                return answer(client.set_async(root, b""))

        return int(self._retrying(client, write).mzxid)

    def _path(self, resource: str) -> str:
        return f"{self.chroot}{self.root}/{znode_name(check_resource(resource))}"

    async def _call(self, doing: str, op: Callable[[KazooClient, T], Any], arg: T) -> Any:
        with map_errors("zookeeper", doing, KazooException, KazooTimeoutError, OSError, fix=FIX):
            client = await self._started()
            try:
                return await self._blocking(op, client, arg)
            except (KazooException, KazooTimeoutError) as exc:  # retried until the deadline: say why
                failed = self._tls_failed()
                if failed is None:
                    raise
                raise failed from exc

    async def _issue(self, resources: Sequence[str]) -> list[int]:
        tokens: list[int] = await self._call("issue a token", self._set, [self._path(r) for r in resources])
        return tokens

    async def _within(self, doing: str, work: Awaitable[T]) -> T:
        """`work` within `timeout` as a whole: the waits for the start, a thread, or the requests ahead
        of it included (each request is bounded on its own, not the queue in front of it)."""
        try:
            async with asyncio.timeout(self.timeout):
                return await work
        except TimeoutError as exc:
            raise self._tls_failed() or TokenSourceError(
                f"zookeeper token source could not {doing} within {self.timeout:g} s; {FIX}",
                source="zookeeper",
            ) from exc

    async def next_token(self, resource: str) -> int:
        return await self._within("issue a token", self._batch.draw(check_resource(resource)))

    async def upper_bound(self, resource: str) -> int:
        check_resource(resource)  # the bound is global (see the module docstring); the name is still checked
        bound: int = await self._within(
            "bound the issued tokens",
            self._call("bound the issued tokens", self._bound, f"{self.chroot}{self.root}"),
        )
        return bound

    async def aclose(self) -> None:
        """Close the client (and its thread pool) after the requests in flight, `CLOSE_GRACE` seconds at
        most: a hung ZooKeeper cannot hold the close (the source opens again on its next use)."""
        await self._batch.aclose(
            within=CLOSE_GRACE,
            abandoned=lambda: TokenSourceError(
                "zookeeper token source was closed before ZooKeeper answered", source="zookeeper"
            ),
        )
        async with self._start_lock:  # a start in progress ends first (connect_timeout at most)
            client, self._client = self._client, None
        if client is not None:
            await asyncio.shield(asyncio.wrap_future(self._dispose_soon(client)))
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def __repr__(self) -> str:
        tls = ", use_ssl=True" if self.use_ssl else ""
        return f"ZooKeeperTokens({self.hosts + self.chroot!r}{tls})"
