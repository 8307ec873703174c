"""The floor under the scaling goal: two round trips to N masters with nothing else.

An acquire+release is two round trips to every master. This yardstick does
exactly that with blocking sockets and PING, no library and no event loop,
so its p50 at N=7 over N=1 is what the machine itself charges for more
masters (each redis-server must be scheduled to answer; on a 2-core machine
seven servers share the cores). Waiting for every master is the floor of a
client that does; waiting for the first quorum is fencegate's own floor.
The same first-quorum round trips on asyncio's loop and transports, with no
Redlock in them, are the floor of any asyncio client; with the lock's own
commands in place of PING (SET NX PX, then the release script), the floor
of an asyncio Redlock, the servers' own work per command included.
"""

from __future__ import annotations

import asyncio
import selectors
import socket
from typing import cast
from urllib.parse import urlsplit

import hiredis

from fencegate.bench.runner import UnitOfWork
from lockclient._nodes import RELEASE
from lockclient.transport.codec import Script, pack

PING = b"*1\r\n$4\r\nPING\r\n"
PONG = b"+PONG\r\n"


class RawFanOut:
    """Two blocking round trips of PING to every master, one connection each.

    With `quorum`, a round trip ends once a majority of the masters has
    answered it, as fencegate's fan-out does; the slower replies are read
    during the next one (a connection's replies come in order).
    """

    def __init__(self, urls: list[str], *, quorum: bool = False) -> None:
        self._socks = []
        for url in urls:
            parts = urlsplit(url)
            sock = socket.create_connection((parts.hostname or "localhost", parts.port or 6379))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks.append(sock)
        self._need = len(urls) // 2 + 1 if quorum else len(urls)
        self._owed = dict.fromkeys(self._socks, 0)  # PONGs sent for and not read yet, per connection
        self._selector = selectors.DefaultSelector()
        for sock in self._socks:
            self._selector.register(sock, selectors.EVENT_READ)

    async def __call__(self) -> None:
        for _ in range(2):  # acquire, then release
            for sock in self._socks:
                sock.sendall(PING)
                self._owed[sock] += 1
            answered = 0
            while answered < self._need:
                for key, _ in self._selector.select():
                    answered += self._read(key.fileobj)  # type: ignore[arg-type]

    def _read(self, sock: socket.socket) -> int:
        """Read what `sock` has; 1 if that answered this round trip (its backlog is now clear)."""
        data = sock.recv(len(PONG) * self._owed[sock])
        count, rest = divmod(len(data), len(PONG))
        if rest or data != PONG * count:
            raise RuntimeError(f"expected PONGs, got {data!r}")  # a short read of loopback PONGs: never seen
        self._owed[sock] -= count
        return 1 if count and self._owed[sock] == 0 else 0

    async def aclose(self) -> None:
        self._selector.close()
        for sock in self._socks:
            sock.close()


class _Replies(asyncio.Protocol):
    """One connection of `AsyncioFanOut`: counts its replies, tells the fan-out when its backlog is clear."""

    def __init__(self, fan: AsyncioFanOut) -> None:
        self.fan = fan
        self.owed = 0  # replies sent for and not read yet
        self.reader = hiredis.Reader()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        count = 0
        while self.reader.gets() is not False:
            count += 1
        self.owed -= count
        if count and self.owed == 0:
            self.fan.answered()


class AsyncioFanOut:
    """Round trips to every master on asyncio, each ending at the first quorum: one per payload."""

    def __init__(self, masters: int, payloads: tuple[bytes, ...]) -> None:
        self.connections: list[_Replies] = []  # one per master, added once connected
        self.payloads = payloads
        self._need = masters // 2 + 1
        self._count = 0
        self._done: asyncio.Future[None] | None = None

    async def __call__(self) -> None:
        for payload in self.payloads:
            await self.round_trip(payload)

    async def round_trip(self, payload: bytes) -> None:
        self._count = 0
        self._done = asyncio.get_running_loop().create_future()
        for connection in self.connections:
            assert connection.transport is not None
            connection.owed += 1
            connection.transport.write(payload)
        await self._done

    def answered(self) -> None:
        self._count += 1
        if self._done is not None and self._count >= self._need and not self._done.done():
            self._done.set_result(None)

    async def aclose(self) -> None:
        for connection in self.connections:
            if connection.transport is not None:
                connection.transport.close()


async def _asyncio_fan_out(urls: list[str], payloads: tuple[bytes, ...]) -> AsyncioFanOut:
    loop = asyncio.get_running_loop()
    fan = AsyncioFanOut(len(urls), payloads)
    for url in urls:
        parts = urlsplit(url)
        _, connection = await loop.create_connection(
            lambda: _Replies(fan), parts.hostname or "localhost", parts.port or 6379
        )
        fan.connections.append(connection)
    return fan


async def asyncio_quorum_fan_out(urls: list[str]) -> UnitOfWork:
    """PING twice: what asyncio itself charges per master."""
    return await _asyncio_fan_out(urls, (PING, PING))


async def asyncio_lock_commands(urls: list[str], key: str) -> UnitOfWork:
    """The lock's own commands, SET NX PX and then the release script by SHA, with no Redlock around them:
    what asyncio and the servers' work per command charge, before any client logic."""
    value = "floor"
    release = Script(RELEASE)
    fan = await _asyncio_fan_out(
        urls, (pack("SET", key, value, "NX", "PX", 10_000), release.evalsha(key, value, f"{key}:released"))
    )
    await fan.round_trip(pack("SCRIPT", "LOAD", release.source))
    return fan


async def raw_fan_out(urls: list[str]) -> UnitOfWork:
    return RawFanOut(urls)


async def raw_quorum_fan_out(urls: list[str]) -> UnitOfWork:
    return RawFanOut(urls, quorum=True)
