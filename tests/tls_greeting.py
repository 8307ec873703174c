"""A TLS server that greets, and the client side of it: for tests of certificates, not of a product.

The greeting shows that a handshake really finished (with TLS 1.3 a client's
handshake ends before the server has checked the client's certificate; a
refusal then arrives on the first read, never as the greeting).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

GREETING = b"hello"
HOST = "127.0.0.1"


@contextlib.asynccontextmanager
async def greeting_server(
    cert: Path, key: Path | None, *, client_ca: Path | None = None
) -> AsyncIterator[int]:
    """A server on a free loopback port with `cert` (and `key`, unless the certificate file holds it)
    that says GREETING; with `client_ca`, it requires a client certificate signed by that CA."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(GREETING)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, HOST, 0, ssl=context)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def hello(port: int, context: ssl.SSLContext, host: str = HOST) -> bytes:
    """What the server on `port` says after a handshake that checks `host` (no DNS: only checked)."""
    reader, writer = await asyncio.open_connection(HOST, port, ssl=context, server_hostname=host)
    try:
        return await reader.read()
    finally:
        await _close(writer)


async def handshake(port: int, context: ssl.SSLContext, host: str) -> ssl.SSLObject:
    """A finished handshake with any TLS server on `port` that checks `host`; its TLS object."""
    _reader, writer = await asyncio.open_connection(HOST, port, ssl=context, server_hostname=host)
    try:
        tls: ssl.SSLObject = writer.get_extra_info("ssl_object")
        return tls
    finally:
        await _close(writer)


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):  # a server may cut the TLS shutdown short
        await writer.wait_closed()
