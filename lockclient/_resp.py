"""A lean RESP2 transport: one pipelined connection per master, replies parsed by hiredis.

Why not redis.asyncio on the hot path: each of its commands checks a
connection out of a pool, takes the connection's lock, runs a task and goes
through several parser layers. Redlock needs three commands and nothing else,
so profiling put most of an acquire+release in that machinery, not in Redis.

How it stays correct:
- Redis answers a connection's commands in the order it received them, so
  requests are written as soon as they are issued (pipelined, whoever issues
  them) and replies are matched to requests first in, first out.
- A request abandoned at the per-node timeout drops its connection at once:
  commands queued behind a slow or hung server would inherit its delay, and a
  late reply is never read. Every other request in flight on it fails with
  `ConnectionError` (it may or may not have been applied; Redlock undoes
  both). The next command opens a new connection. A request whose caller was
  cancelled keeps its place instead: its reply is read and discarded, so an
  undo sent next on the same connection runs after it.
- A lost connection fails what is in flight on it; the next command reconnects.
- Scripts go as EVALSHA; a NOSCRIPT reply (a restarted server forgets its
  scripts) resends that one request as EVAL from the reply path, in order.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import ssl
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis

__all__ = [
    "PENDING",
    "Batch",
    "Command",
    "Connection",
    "Convert",
    "Endpoint",
    "Link",
    "Reply",
    "Script",
    "ServerError",
    "open_link",
    "pack",
]

T = TypeVar("T")

Convert = Callable[[Any], T]
Push = Callable[[Any], None]


class ServerError(Exception):
    """An error reply from Redis (NOSCRIPT, WRONGTYPE, NOAUTH, ...)."""


def pack(*args: str | bytes | int) -> bytes:
    """One command in RESP, encoded in C by hiredis."""
    return hiredis.pack_command(args)  # type: ignore[no-any-return, arg-type]


class Script:
    """A Lua script sent by SHA1; its source is sent only after a NOSCRIPT reply."""

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA1

    def evalsha(self, key: str, *args: str | bytes | int) -> bytes:
        return pack("EVALSHA", self.sha, 1, key, *args)

    def eval(self, key: str, *args: str | bytes | int) -> bytes:
        return pack("EVAL", self.source, 1, key, *args)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a master listens and how to log in, read from its URL."""

    host: str = "localhost"
    port: int = 6379
    path: str | None = None  # a unix socket
    tls: bool = False
    username: str | None = None
    password: str | None = None
    db: int = 0

    @classmethod
    def from_url(cls, url: str) -> Endpoint:
        """`redis://[user:password@]host[:port][/db]`, `rediss://...` (TLS), `unix:///path[?db=n]`."""
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        db_text = query.get("db", [parts.path.lstrip("/") if parts.scheme != "unix" else ""])[0] or "0"
        username = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password else None
        if parts.scheme == "unix":
            return cls(path=parts.path, username=username, password=password, db=int(db_text))
        return cls(
            host=parts.hostname or "localhost", port=parts.port or 6379, tls=parts.scheme == "rediss",
            username=username, password=password, db=int(db_text),
        )  # fmt: skip

    def handshake(self) -> list[bytes]:
        """The commands a new connection sends before any other: AUTH and SELECT, when needed."""
        commands = []
        if self.password is not None:
            auth = (self.username, self.password) if self.username else (self.password,)
            commands.append(pack("AUTH", *auth))
        if self.db:
            commands.append(pack("SELECT", self.db))
        return commands


@dataclass(frozen=True, slots=True)
class Command(Generic[T]):
    """One request as sent, encoded once (a fan-out sends the same one to every master), and how to
    read its reply."""

    payload: bytes
    convert: Convert[T]
    fallback: bytes | None = None  # a script's EVAL, sent after a NOSCRIPT reply to its EVALSHA


class _NotYet:
    """The outcome of a reply that has not been resolved."""

    __slots__ = ()


_NOT_YET: Any = _NotYet()


class Reply(Generic[T]):
    """The answer to one request, resolved once: handed to its fan-out's `Batch`, or to whoever awaits it.

    Not a future: a fan-out reads its replies through the batch, so none
    of them pays for a future of its own; one is made only if the reply is
    awaited directly. `expire()` (the per-node timeout) drops the connection
    it was written to; `cancel()` (the caller was cancelled) keeps its place
    in the order: its reply is read and discarded, and whatever the caller
    sends next runs after it.
    """

    __slots__ = ("_future", "batch", "convert", "fallback", "index", "link", "outcome")

    def __init__(self, convert: Convert[T], fallback: bytes | None = None) -> None:
        self.convert = convert
        self.fallback = fallback  # the script's EVAL, sent after a NOSCRIPT reply
        self.outcome: Any = _NOT_YET  # the converted reply, or the exception that ended the request
        self.link: Link | None = None
        self.batch: Batch | None = None
        self.index = 0
        self._future: asyncio.Future[T] | None = None

    def done(self) -> bool:
        return self.outcome is not _NOT_YET

    def resolve(self, outcome: Any) -> bool:
        """Settle with a value or an exception; False if it was settled already."""
        if self.outcome is not _NOT_YET:
            return False
        self.outcome = outcome
        if self.batch is not None:
            self.batch.deliver(self.index, outcome)
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
            if self.outcome is not _NOT_YET:
                _settle(future, self.outcome)
            else:
                future.add_done_callback(self._awaiter_gone)
        return future.__await__()

    def _awaiter_gone(self, future: asyncio.Future[T]) -> None:
        if future.cancelled():  # the task awaiting it was cancelled
            self.cancel()


def _settle(future: asyncio.Future[Any], outcome: Any) -> None:
    if isinstance(outcome, asyncio.CancelledError):
        future.cancel()
    elif isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class _Done(asyncio.Future[list[Any]]):
    """A batch's outcome; cancelling it (its caller was cancelled) cancels the replies and the timer,
    unless the batch is shielded."""

    batch: Batch | None = None

    def cancel(self, msg: Any | None = None) -> bool:
        if not super().cancel(msg):
            return False
        if self.batch is not None and not self.batch.shielded:
            self.batch.abandon()
        return True


class Batch:
    """Every reply of one fan-out as one future, `done`: no callback or task per node.

    With `need`, `done` resolves as soon as the outcome is settled: `need`
    replies were True, or so many were not that `need` no longer can be
    (False only, or any non-True answer when `errors_count`). The replies
    still out stay `PENDING` in `results` until they land there later: a
    quorum never waits on the slowest master. After `per_node` seconds, the
    replies still out expire (their connections are dropped) and are
    reported as `TimeoutError`. A `shielded` batch outlives its caller's
    cancellation: its requests are still sent (those queued behind a
    connection being opened too) and read, as under `asyncio.shield`, without
    the extra loop iteration that shield's own future costs.
    """

    __slots__ = (
        "done",
        "errors_count",
        "hopeless",
        "left",
        "need",
        "no",
        "replies",
        "results",
        "shielded",
        "timer",
        "yes",
    )

    def __init__(
        self,
        replies: Sequence[Reply[Any]],
        per_node: float,
        *,
        need: int | None = None,
        errors_count: bool = True,
        shielded: bool = False,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.replies = replies
        self.shielded = shielded
        self.results: list[Any] = [PENDING] * len(replies)
        self.left = len(replies)
        never = len(replies) + 1
        self.need = never if need is None else need  # `need` yes answers settle it early
        self.hopeless = never if need is None else len(replies) - need + 1  # and so many noes
        self.errors_count = errors_count
        self.yes = self.no = 0
        self.done = _Done(loop=loop)
        self.done.batch = self
        self.timer = loop.call_later(per_node, self._expire)
        for index, reply in enumerate(replies):
            if reply.outcome is not _NOT_YET:
                self.deliver(index, reply.outcome)
            else:
                reply.batch, reply.index = self, index
        if not replies:
            self.deliver(-1, None)

    def deliver(self, index: int, outcome: Any) -> None:
        if index >= 0:
            self.results[index] = outcome
            if outcome is True:
                self.yes += 1
            elif outcome is False or (self.errors_count and isinstance(outcome, BaseException)):
                self.no += 1
        self.left -= 1
        if self.left <= 0:
            self.timer.cancel()
        elif self.yes < self.need and self.no < self.hopeless:
            return
        if not self.done.done():
            self.done.set_result(self.results)

    def _expire(self) -> None:
        for reply in self.replies:
            if reply.outcome is _NOT_YET:
                reply.expire()

    def abandon(self) -> None:
        """The caller is gone: stop the timer; the replies are read and discarded in order."""
        self.timer.cancel()
        for reply in self.replies:
            reply.cancel()


class _Pending:
    """A master that had not answered when the fan-out's outcome was settled."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PENDING"


PENDING: Any = _Pending()


class Link(asyncio.Protocol):
    """One open connection: requests in flight, matched to replies in order; or, with `push`,
    a subscriber connection whose every message goes to `push`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.push: Push | None = None
        self._reader = hiredis.Reader(replyError=ServerError)
        self._inflight: collections.deque[Reply[Any]] = collections.deque()
        self._transport: asyncio.Transport | None = None
        self.open = True
        self.gone = asyncio.Event()  # set once the connection is closed, whoever closed it

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, whatever its class: uvloop's implement the interface without subclassing.
        self._transport = cast(asyncio.Transport, transport)

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
            except hiredis.ProtocolError as exc:
                self.drop(f"the server sent something that is not RESP: {exc}")
                return
            if reply is False:
                return
            if self.push is not None:
                self.push(reply)
            elif self._inflight:
                request = self._inflight.popleft()
                if request.outcome is not _NOT_YET:
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

    def drop(self, why: str) -> None:
        """Close at once and fail every request still in flight (whether the server applied it is unknown)."""
        if not self.open:
            return
        self.open = False
        self.gone.set()
        if self._transport is not None:
            self._transport.abort()
        error = ConnectionError(f"connection to {self.name} dropped: {why}")
        while self._inflight:
            self._inflight.popleft().resolve(error)

    def connection_lost(self, exc: Exception | None) -> None:
        self.drop(f"lost ({exc})" if exc is not None else "closed by the server")


async def open_link(endpoint: Endpoint, name: str, *, timeout: float) -> Link:  # noqa: ASYNC109 - a handshake bound
    """Connect and log in within `timeout` seconds; `ConnectionError` saying why not."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            if endpoint.path is not None:
                _, link = await loop.create_unix_connection(lambda: Link(name), endpoint.path)
            else:
                tls = ssl.create_default_context() if endpoint.tls else None
                _, link = await loop.create_connection(
                    lambda: Link(name), endpoint.host, endpoint.port, ssl=tls
                )
            try:
                for command in endpoint.handshake():
                    reply: Reply[Any] = Reply(_same)
                    link.send(command, reply)
                    await reply
            except BaseException:
                link.drop("the handshake failed")
                raise
    except TimeoutError:
        raise ConnectionError(f"cannot connect to {name}: no answer within {timeout * 1000:.0f} ms") from None
    except (OSError, ServerError) as exc:
        raise ConnectionError(f"cannot connect to {name}: {exc}") from exc
    return link


def _same(reply: Any) -> Any:
    return reply


class Connection:
    """A master's command connection: opened on first use, reopened on the first use after a failure.

    Requests issued while it opens wait in a queue; one that is abandoned
    meanwhile is never sent.
    """

    def __init__(self, endpoint: Endpoint, name: str, *, connect_timeout: float) -> None:
        self.endpoint = endpoint
        self.name = name
        self._connect_timeout = connect_timeout
        self._link: Link | None = None
        self._opening: asyncio.Task[None] | None = None
        self._queued: list[tuple[bytes, Reply[Any]]] = []

    def send(self, command: Command[T]) -> Reply[T]:
        """Send `command` (pipelined); its reply, converted, resolves the returned `Reply`."""
        reply = Reply(command.convert, command.fallback)
        link = self._link
        if link is not None and link.open:
            link.send(command.payload, reply)
            return reply
        self._queued.append((command.payload, reply))
        if self._opening is None:
            self._opening = asyncio.get_running_loop().create_task(self._open(), name=f"connect {self.name}")
        return reply

    async def _open(self) -> None:
        try:
            link = await open_link(self.endpoint, self.name, timeout=self._connect_timeout)
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
            self._link.drop("closed by the client")
            self._link = None
