"""The delay proxy forwards faithfully, and holds bytes in the network until told or timed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from fencegate.lab.errors import FaultError
from fencegate.lab.faults.proxy import DelayProxy
from tests.waiting import eventually


class Echo:
    """A real TCP echo server that notes when each chunk arrived."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, bytes]] = []
        self.server: asyncio.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            self.arrivals.append((time.monotonic(), data))
            writer.write(data)
            await writer.drain()
        writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    server = Echo()
    server.server = await asyncio.start_server(server._handle, "127.0.0.1", 0)
    yield server
    server.server.close()
    await server.server.wait_closed()


async def roundtrip(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


@contextlib.asynccontextmanager
async def echoed(
    proxy: DelayProxy, first: bytes
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A connection through `proxy` that has echoed `first` back, closed on the way out."""
    reader, writer = await roundtrip(proxy.port)
    writer.write(first)
    assert await reader.readexactly(len(first)) == first
    try:
        yield reader, writer
    finally:
        writer.close()
        await writer.wait_closed()


async def test_bytes_pass_through_both_ways(echo: Echo) -> None:
    async with DelayProxy("127.0.0.1", echo.port) as proxy, echoed(proxy, b"hello"):
        assert proxy.forwarded == {"up": 5, "down": 5}


async def test_a_timed_hold_delivers_no_earlier_than_its_deadline(echo: Echo) -> None:
    async with DelayProxy("127.0.0.1", echo.port) as proxy, echoed(proxy, b"a") as (reader, writer):
        proxy.hold(0.3)
        deadline = time.monotonic() + 0.3
        writer.write(b"b")
        assert await reader.readexactly(1) == b"b"
        assert echo.arrivals[-1][0] >= deadline  # the upstream server saw it only after the hold


async def test_holding_one_connection_leaves_the_others_alone(echo: Echo) -> None:
    async with DelayProxy("127.0.0.1", echo.port) as proxy:
        held_reader, held = await roundtrip(proxy.port)
        held.write(b"1")
        assert await held_reader.readexactly(1) == b"1"
        other_reader, other = await roundtrip(proxy.port)
        other.write(b"x")
        assert await other_reader.readexactly(1) == b"x"
        assert proxy.connections == 2
        proxy.hold(60, connection=0)
        held.write(b"stale write")
        other.write(b"y")
        assert await other_reader.readexactly(1) == b"y"
        assert all(data != b"stale write" for _, data in echo.arrivals)  # still in the network
        proxy.hold(0)  # let it through
        assert await held_reader.readexactly(11) == b"stale write"
        for writer in (held, other):
            writer.close()
            await writer.wait_closed()


async def test_an_http_request_is_held_past_the_deadline() -> None:
    seen: list[float] = []

    async def put(request: web.Request) -> web.Response:
        seen.append(time.monotonic())
        return web.json_response({"body": (await request.read()).decode()})

    app = web.Application()
    app.router.add_put("/v1/objects/{key}", put)
    async with TestServer(app, host="127.0.0.1") as server:
        assert server.port is not None
        async with DelayProxy("127.0.0.1", server.port) as proxy, aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{proxy.port}/v1/objects/counter"
            proxy.hold(0.3)
            deadline = time.monotonic() + 0.3
            async with session.put(url, data=b"1") as response:
                assert (await response.json()) == {"body": "1"}
            assert seen[0] >= deadline


async def test_retarget_moves_new_connections_and_drop_cuts_the_old(echo: Echo) -> None:
    other = Echo()
    other.server = await asyncio.start_server(other._handle, "127.0.0.1", 0)
    try:
        async with DelayProxy("127.0.0.1", echo.port) as proxy:
            old_reader, old = await roundtrip(proxy.port)
            old.write(b"1")
            assert await old_reader.readexactly(1) == b"1"
            proxy.retarget("127.0.0.1", other.port)
            await proxy.drop()
            assert await old_reader.read() == b""  # the old connection was cut
            new_reader, new = await roundtrip(proxy.port)
            new.write(b"2")
            assert await new_reader.readexactly(1) == b"2"
            assert [data for _, data in other.arrivals] == [b"2"]
            for writer in (old, new):
                writer.close()
                await writer.wait_closed()
    finally:
        other.server.close()
        await other.server.wait_closed()


async def test_bad_holds_are_refused(echo: Echo) -> None:
    async with DelayProxy("127.0.0.1", echo.port) as proxy:
        with pytest.raises(FaultError, match="duration >= 0"):
            proxy.hold(-1)
        with pytest.raises(FaultError, match="no connection 3"):
            proxy.hold(1, connection=3)


async def test_a_cut_link_loses_its_held_bytes_and_reopens(echo: Echo) -> None:
    """The five-node partition: hold both ways, drop (the held bytes are lost), reopen."""
    async with DelayProxy("127.0.0.1", echo.port) as proxy, echoed(proxy, b"up") as (reader, writer):
        proxy.hold(3600, direction="both")  # the link is open (it echoed), and now holds what it gets
        writer.write(b"late SET NX")
        await writer.drain()
        await proxy.drop()
        proxy.hold(0, direction="both")
        assert await reader.read() == b""  # the cut connection is closed
        assert [data for _, data in echo.arrivals] == [b"up"]  # the held bytes never arrived
        again, writer2 = await roundtrip(proxy.port)
        writer2.write(b"ping")
        await writer2.drain()
        assert await again.readexactly(4) == b"ping"  # a new connection passes at once
        writer2.close()


async def test_drop_cuts_a_connection_whose_upstream_is_still_opening(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A partition that races a connect: the client is cut although the upstream never answered, and
    nothing is logged as an error (asyncio's stream server logs a handler task that ends cancelled)."""
    with socket.socket() as full:  # a real listener that accepts nothing: once its backlog is full,
        full.bind(("127.0.0.1", 0))  # the kernel drops new SYNs and a connect to it stays open
        full.listen(0)
        fillers = []
        try:
            while True:
                filler = socket.socket()
                fillers.append(filler)
                filler.settimeout(0.2)
                try:
                    filler.connect(full.getsockname())
                except TimeoutError:  # not answered: the backlog is full
                    break
            async with DelayProxy(*full.getsockname()) as proxy:
                reader, writer = await roundtrip(proxy.port)
                await eventually(lambda: proxy.connections == 1, within=5.0, what="the proxy's accept")
                await proxy.drop()
                assert await asyncio.wait_for(reader.read(), timeout=5.0) == b""  # cut, not left waiting
                writer.close()
            assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
        finally:
            for filler in fillers:
                filler.close()
