"""One master's connection: a socket (TCP, TLS or unix), its login, and replies matched to requests.

How it stays correct:
- Redis answers a connection's commands in the order it received them, so
  requests are written as soon as they are issued (pipelined, whoever issues
  them) and replies are matched to requests first in, first out.
- A request abandoned at the per-node timeout drops its connection at once:
  commands queued behind a slow or hung server would inherit its delay, and a
  late reply is never read. Every other request in flight on it fails with
  `ConnectionAbortedError` (it may or may not have been applied; Redlock
  undoes both). The next command opens a new connection. A request whose
  caller was cancelled keeps its place instead: its reply is read and
  discarded, so an undo sent next on the same connection runs after it.
- A lost connection fails what is in flight on it; the next command reconnects.
- Scripts go as EVALSHA; a NOSCRIPT reply (a restarted server forgets its
  scripts) resends that one request as EVAL from the reply path, in order.
- `rediss://` is TLS or nothing: a failed handshake is a `TLSError` naming
  the master and the reason, never a retry in plaintext.

A failed request or connection ends in one exception that says what happened
(`lockclient.transport.fanout` lists them, with what each means for a
master): the OS's and the TLS library's errors are translated here, when
the connection opens and when it is lost.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import functools
import ssl
from collections.abc import Callable, Generator
from typing import Any, Final, Generic, Protocol, TypeVar, cast

from lockclient.errors import TLSError
from lockclient.tls import explain, explain_hang_up
from lockclient.transport.codec import Command, Convert, ProtocolError, ServerError, pack, reader
from lockclient.transport.endpoint import Endpoint, tls_context
from lockclient.transport.errors import AuthenticationError, ConnectTimeout

__all__ = [
    "UNSET",
    "Connection",
    "Link",
    "Push",
    "Reply",
    "Unset",
    "Waiter",
    "open_link",
]

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

Push = Callable[[object], None]


class Unset(enum.Enum):
    """The type of `UNSET`: a reply that has not settled yet."""

    UNSET = enum.auto()


UNSET: Final = Unset.UNSET

# how long a close waits for the requests still in flight (the minority's answers to a release
# that the quorum already answered), so their deletes reach the master instead of expiring later
CLOSE_GRACE: Final = 1.0


class Waiter(Protocol[T_contra]):
    """Who a reply hands its outcome to when it settles (a fan-out's batch)."""

    def deliver(self, outcome: T_contra | BaseException) -> None: ...


class Reply(Generic[T]):
    """The answer to one request, settled once: handed to its `Waiter`, or to whoever awaits it.

    Not a future: a fan-out reads its replies through its batch, so none of
    them pays for a future of its own; one is made only if the reply is
    awaited directly. `expire()` (the per-node timeout) drops the connection
    it was written to; `cancel()` (the caller was cancelled) keeps its place
    in the order: its reply is read and discarded, and whatever the caller
    sends next runs after it.
    """

    __slots__ = ("_future", "convert", "fallback", "link", "outcome", "waiter")

    def __init__(self, convert: Convert[T], fallback: bytes | None = None) -> None:
        self.convert = convert
        self.fallback = fallback  # the script's EVAL, sent after a NOSCRIPT reply
        # the converted reply, or the exception that ended the request; UNSET until then
        self.outcome: T | BaseException | Unset = UNSET
        self.link: Link | None = None
        self.waiter: Waiter[T] | None = None
        self._future: asyncio.Future[T] | None = None

    def done(self) -> bool:
        return self.outcome is not UNSET

    def resolve(self, outcome: T | BaseException) -> bool:
        """Settle with a value or an exception; False if it was settled already."""
        if self.outcome is not UNSET:
            return False
        self.outcome = outcome
        if self.waiter is not None:
            self.waiter.deliver(outcome)
        if self._future is not None and not self._future.done():
            _settle(self._future, outcome)
        return True

    def cancel(self) -> bool:
        return self.resolve(asyncio.CancelledError())

    def expire(self) -> None:
        """Give up at the per-node timeout: the server is slow or hung, so close the connection."""
        if self.resolve(TimeoutError()) and self.link is not None:
            self.link.drop("a request on it timed out")

    def __await__(self) -> Generator[Any, None, T]:
        future = self._future
        if future is None:
            future = self._future = asyncio.get_running_loop().create_future()
            if self.outcome is not UNSET:
                _settle(future, self.outcome)
            else:
                future.add_done_callback(self._awaiter_gone)
        return future.__await__()

    def _awaiter_gone(self, future: asyncio.Future[T]) -> None:
        if future.cancelled():  # the task awaiting it was cancelled
            self.cancel()


def _settle(future: asyncio.Future[T], outcome: T | BaseException) -> None:
    if isinstance(outcome, asyncio.CancelledError):
        future.cancel()
    elif isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class Link(asyncio.Protocol):
    """One open connection: requests in flight, matched to replies in order; or, with `push`,
    a subscriber connection whose every message goes to `push`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.push: Push | None = None
        self._reader = reader()
        self._inflight: collections.deque[Reply[Any]] = collections.deque()
        self._transport: asyncio.Transport | None = None
        self.open = True
        self.why = ""  # why it was dropped
        self.gone = asyncio.Event()  # set once the connection is closed, whoever closed it

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, whatever its class: uvloop's implement the interface without subclassing.
        self._transport = cast(asyncio.Transport, transport)

    @property
    def made(self) -> bool:
        """Whether the connection was made (over TLS: the handshake finished)."""
        return self._transport is not None

    def send(self, payload: bytes, reply: Reply[Any]) -> None:
        assert self._transport is not None
        reply.link = self
        self._inflight.append(reply)
        self._transport.write(payload)

    def write(self, payload: bytes) -> None:
        """Send without expecting a matched reply (subscriber connections)."""
        if self._transport is not None and self.open:
            self._transport.write(payload)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        while True:
            try:
                reply = reader.gets()
            except ProtocolError as exc:
                self.drop(f"the server sent something that is not RESP: {exc}")
                return
            if reply is False:
                return
            if self.push is not None:
                self.push(reply)
            elif self._inflight:
                request = self._inflight.popleft()
                if request.outcome is not UNSET:
                    continue  # its caller was cancelled: the reply is read and dropped, so the order holds
                if isinstance(reply, ServerError):
                    self._failed(request, reply)
                else:
                    request.resolve(request.convert(reply))
            else:
                self.drop("the server sent a reply nobody asked for")
                return

    def _failed(self, request: Reply[Any], error: ServerError) -> None:
        fallback = request.fallback
        if fallback is not None and str(error).startswith("NOSCRIPT"):
            # the server forgot the script (a restart): send its source, behind what is in flight
            request.fallback = None
            self.send(fallback, request)
        else:
            request.resolve(error)

    @property
    def busy(self) -> bool:
        """Requests were sent and not all answered yet."""
        return bool(self._inflight)

    def drop(self, why: str, kind: Callable[[str], ConnectionError] = ConnectionAbortedError) -> None:
        """Close at once and fail every request in flight with `kind` (whether the server applied it is
        unknown); by default the client gave up on the connection."""
        if not self.open:
            return
        self.open = False
        self.why = why
        self.gone.set()
        if self._transport is not None:
            self._transport.abort()
        error = kind(f"connection to {self.name} dropped: {why}")
        while self._inflight:
            self._inflight.popleft().resolve(error)

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ssl.SSLError):
            self.drop(f"TLS: {_explain(exc)}", functools.partial(TLSError, server=self.name))
        else:
            self.drop(f"lost ({exc})" if exc is not None else "closed by the server", ConnectionResetError)


_CLIENT_CERTIFICATE = "ssl_certfile and ssl_keyfile"  # the URL settings `explain` names as the fix


def _explain(exc: ssl.SSLError) -> str:
    return explain(exc, peer="master", ca="ssl_ca_certs", client=_CLIENT_CERTIFICATE) or str(exc)


def _same(reply: object) -> object:
    return reply


def _connect_error(endpoint: Endpoint, name: str, exc: BaseException, link: Link | None) -> ConnectionError:
    """What kept a connection from opening, as one of the transport's failures, naming the master."""
    prefix = f"cannot connect to {name}"
    if isinstance(exc, ssl.SSLError):
        return TLSError(f"{prefix}: TLS: {_explain(exc)}", server=name)
    if isinstance(exc, ServerError):
        return AuthenticationError(f"{prefix}: the master refused the URL's login or database: {exc}")
    if isinstance(exc, ConnectionError):  # the OS's (refused, reset), or the link's own when it dropped
        why = link.why if link is not None and not link.open else str(exc)
        if isinstance(exc, ConnectionResetError) and endpoint.tls is not None and link and link.made:
            # The handshake finished and the master hung up before its first answer: with TLS 1.3 that
            # is how a master refuses the client's certificate (its alert is often lost to the reset).
            fix = explain_hang_up(
                gave_certificate=endpoint.tls.ssl_certfile is not None,
                peer="master",
                client=_CLIENT_CERTIFICATE,
            )
            return TLSError(
                f"{prefix}: TLS: the master hung up right after the handshake ({why}): {fix}", server=name
            )
        if isinstance(exc, TLSError):  # the link dropped on a TLS alert after the handshake
            return TLSError(f"{prefix}: {why}", server=name)
        return type(exc)(f"{prefix}: {why}")
    return ConnectionError(f"{prefix}: {exc}")


async def open_link(
    endpoint: Endpoint,
    name: str,
    *,
    timeout: float,  # noqa: ASYNC109 - a handshake bound
    tls: ssl.SSLContext | None,
) -> Link:
    """Connect (over TLS with `tls`) and log in within `timeout` seconds; a `ConnectionError` saying
    why not."""
    loop = asyncio.get_running_loop()
    made: list[Link] = []  # the link exists once the socket is connected (before a TLS handshake)

    def new_link() -> Link:
        made.append(Link(name))
        return made[-1]

    try:
        async with asyncio.timeout(timeout):
            if endpoint.path is not None:
                _, link = await loop.create_unix_connection(new_link, endpoint.path)
            else:
                _, link = await loop.create_connection(new_link, endpoint.host, endpoint.port, ssl=tls)
            try:
                for command in endpoint.handshake():
                    reply: Reply[object] = Reply(_same)
                    link.send(command, reply)
                    await reply
            except BaseException:
                link.drop("the handshake failed")
                raise
    except TimeoutError:
        why = f"no answer within {timeout * 1000:.0f} ms"
        if tls is not None and made and not made[0].made:
            why += " to the TLS handshake (is the master hung, or does it not speak TLS on this port?)"
        raise ConnectTimeout(f"cannot connect to {name}: {why}") from None
    except (OSError, ServerError) as exc:  # OSError holds ssl.SSLError and every ConnectionError
        raise _connect_error(endpoint, name, exc, made[0] if made else None) from exc
    return link


class Connection:
    """A master's command connection: opened on first use, reopened on the first use after a failure.

    Requests issued while it opens wait in a queue; one that is abandoned
    meanwhile is never sent. The TLS context is built once, when the
    connection is made, so a certificate file that cannot be read is an
    error then (`ValueError`), not at the first lock.
    """

    def __init__(self, endpoint: Endpoint, name: str, *, connect_timeout: float) -> None:
        self.endpoint = endpoint
        self.name = name
        self.tls = tls_context(endpoint.tls) if endpoint.tls is not None else None
        self._connect_timeout = connect_timeout
        self._link: Link | None = None
        self._opening: asyncio.Task[None] | None = None
        self._queued: list[tuple[bytes, Reply[Any]]] = []

    def send(self, command: Command[T]) -> Reply[T]:
        """Send `command` (pipelined); its reply, converted, settles the returned `Reply`."""
        reply = Reply(command.convert, command.fallback)
        link = self._link
        if link is not None and link.open:
            link.send(command.payload, reply)
            return reply
        self._queued.append((command.payload, reply))
        if self._opening is None:
            self._opening = asyncio.get_running_loop().create_task(self._open(), name=f"connect {self.name}")
        return reply

    async def connect(self, *, timeout: float) -> Link:  # noqa: ASYNC109 - a handshake bound
        """A new connection to the same master, of its own (a subscriber's)."""
        return await open_link(self.endpoint, self.name, timeout=timeout, tls=self.tls)

    async def _open(self) -> None:
        try:
            link = await self.connect(timeout=self._connect_timeout)
        except ConnectionError as exc:
            queued, self._queued = self._queued, []
            for _, reply in queued:
                reply.resolve(exc)
            return
        finally:
            self._opening = None
        self._link = link
        queued, self._queued = self._queued, []
        for payload, reply in queued:
            if not reply.done():
                link.send(payload, reply)

    async def aclose(self) -> None:
        opening, self._opening = self._opening, None
        if opening is not None:
            opening.cancel()
            await asyncio.gather(opening, return_exceptions=True)
        for _, reply in self._queued:
            reply.cancel()
        self._queued = []
        if self._link is not None:
            await self._drain(self._link)
            self._link.drop("closed by the client")
            self._link = None

    @staticmethod
    async def _drain(link: Link) -> None:
        """Wait (at most `CLOSE_GRACE`) for the replies in flight: a PING sent behind them is
        answered after them, the connection keeping the order."""
        if not link.open or not link.busy:
            return
        last: Reply[object] = Reply(_same)
        link.send(pack("PING"), last)
        try:
            async with asyncio.timeout(CLOSE_GRACE):
                await last
        except (TimeoutError, ConnectionError, ServerError):
            pass  # the close goes on: what was in flight is now in the master's hands or lost
