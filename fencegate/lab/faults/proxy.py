"""A TCP proxy of the lab's own that can hold a connection's bytes in the network.

Kleppmann's delayed-packet case: the holder's write leaves the client in
time, then sits in the network past the lease's TTL and reaches the storage
after another client has taken over. The lab puts a `DelayProxy` between a
client and the storage and, on command, calls `hold(seconds)`: bytes read
from then on are forwarded no earlier than the deadline, in order, without
loss. `hold(0)` lets everything held through at once. A hold applies to every
connection of the proxy, or to one (`connection=` index in accept order).

`retarget(host, port)` sends new connections elsewhere, as a virtual IP moves
on failover; `drop()` cuts every open connection (what the old master's
clients see when it dies).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

from fencegate.lab.errors import FaultError

CHUNK = 65536
Direction = Literal["up", "down", "both"]


@dataclass
class _Holds:
    """Deadlines (monotonic) before which bytes must not be forwarded, per direction."""

    up: float = 0.0
    down: float = 0.0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def set(self, until: float, direction: Direction) -> None:
        if direction in ("up", "both"):
            self.up = until
        if direction in ("down", "both"):
            self.down = until
        self.changed.set()
        self.changed = asyncio.Event()


class DelayProxy:
    """Listens on loopback, forwards to `upstream`; delays bytes on command."""

    def __init__(
        self, upstream_host: str, upstream_port: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._clock = clock
        self._server: asyncio.Server | None = None
        self._all = _Holds()
        self._holds: list[_Holds] = []
        self._tasks: set[asyncio.Task[None]] = set()
        # accepted connections whose upstream is still being opened, and the task opening it
        self._opening: dict[asyncio.StreamWriter, asyncio.Task[None] | None] = {}
        self.forwarded = {"up": 0, "down": 0}

    @property
    def port(self) -> int:
        if self._server is None:
            raise FaultError(
                "the proxy is not listening: use `async with DelayProxy(...)` or `await start()`"
            )
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def connections(self) -> int:
        return len(self._holds)

    async def start(self) -> DelayProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    def hold(self, seconds: float, *, connection: int | None = None, direction: Direction = "up") -> None:
        """Forward bytes read from now on no earlier than `seconds` from now."""
        if seconds < 0:
            raise FaultError(f"hold of {seconds} s: a hold is a duration >= 0 (0 releases what is held)")
        if connection is not None and not 0 <= connection < len(self._holds):
            raise FaultError(f"no connection {connection}: this proxy has accepted {len(self._holds)}")
        until = self._clock() + seconds
        if connection is not None:
            self._holds[connection].set(until, direction)
            return
        self._all.set(until, direction)
        if seconds == 0:  # a proxy-wide release also lets every per-connection hold through
            for holds in self._holds:
                holds.set(0.0, direction)

    def retarget(self, host: str, port: int) -> None:
        """New connections go to (host, port) from now on; open ones stay where they are."""
        self._upstream = (host, port)

    async def drop(self) -> None:
        """Close every open connection; bytes held in the proxy are lost, as on a dead link.

        A connection whose upstream is still being opened is cut too: a
        partition does not wait for a handshake to finish.
        """
        openers = [opener for opener in self._opening.values() if opener is not None]
        for writer, opener in self._opening.items():
            writer.close()
            if opener is not None:
                opener.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*openers, *self._tasks, return_exceptions=True)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        await self.drop()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> DelayProxy:
        return await self.start()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        holds = _Holds()
        self._holds.append(holds)
        self._opening[writer] = asyncio.current_task()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except (OSError, asyncio.CancelledError):
            # Cancelled only by `drop`, which cuts the link: the handler ends as a cut connection does,
            # since asyncio's stream server (3.11) logs a handler task that ends cancelled as an error.
            writer.close()
            return
        finally:
            del self._opening[writer]
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer, holds, "up")),
            asyncio.create_task(self._pump(up_reader, writer, holds, "down")),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            self._tasks.difference_update(pumps)
            for stream in (writer, up_writer):
                stream.close()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        holds: _Holds,
        direction: Literal["up", "down"],
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(CHUNK):
                await self._wait_until_released(holds, direction)
                writer.write(data)
                await writer.drain()
                self.forwarded[direction] += len(data)
            if writer.can_write_eof():
                writer.write_eof()

    async def _wait_until_released(self, holds: _Holds, direction: Literal["up", "down"]) -> None:
        while True:
            until = max(getattr(holds, direction), getattr(self._all, direction))
            remaining = until - self._clock()
            if remaining <= 0:
                return
            changed = [holds.changed.wait(), self._all.changed.wait()]
            waiters = [asyncio.ensure_future(c) for c in changed]
            try:
                await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:  # also when a drop cancels the pump mid-wait: no waiter outlives it
                for waiter in waiters:
                    waiter.cancel()
