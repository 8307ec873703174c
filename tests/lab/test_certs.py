"""The throwaway CA's certificates pass and fail real TLS handshakes as they should."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fencegate.lab.cluster.certs import Authority, KeyPair


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("ca"))


async def _serve(pair: KeyPair, *, client_ca: Path | None = None) -> AsyncIterator[int]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pair.cert, pair.key)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def _hello(port: int, context: ssl.SSLContext, host: str = "127.0.0.1") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=host)
    try:
        return await reader.read()
    finally:
        writer.close()


def _client(authority: Authority, pair: KeyPair | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=authority.cert)
    if pair is not None:
        context.load_cert_chain(pair.cert, pair.key)
    return context


async def test_a_server_certificate_is_trusted_through_the_ca_alone(authority: Authority) -> None:
    async for port in _serve(authority.issue("server")):
        assert await _hello(port, _client(authority)) == b"hello"
        assert await _hello(port, _client(authority), host="localhost") == b"hello"


@pytest.mark.parametrize(
    ("pair_args", "host", "reason"),
    [
        ({"expired": True}, "127.0.0.1", "certificate has expired"),
        ({"hosts": ("db.example",)}, "127.0.0.1", "IP address mismatch"),
    ],
)
async def test_an_expired_or_wrong_host_certificate_is_refused(
    authority: Authority, pair_args: dict[str, object], host: str, reason: str
) -> None:
    pair = authority.issue(f"bad-{len(pair_args)}-{reason[:4]}", **pair_args)  # type: ignore[arg-type]
    async for port in _serve(pair):
        with pytest.raises(ssl.SSLCertVerificationError, match=reason):
            await _hello(port, _client(authority), host=host)


async def test_another_ca_is_refused(authority: Authority, tmp_path: Path) -> None:
    stranger = Authority(tmp_path / "other")
    async for port in _serve(authority.issue("server-2")):
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            await _hello(port, _client(stranger))


async def test_a_server_that_requires_a_client_certificate_gets_one_from_the_ca(authority: Authority) -> None:
    client = authority.issue("alice", hosts=(), server=False, client=True)
    async for port in _serve(authority.issue("server-3"), client_ca=authority.cert):
        assert await _hello(port, _client(authority, client)) == b"hello"
        # TLS 1.3: the client's handshake ends before the server checks it; the refusal is an alert
        # on the first read, or a closed stream, never the greeting.
        try:
            answer = await _hello(port, _client(authority))
        except (ssl.SSLError, ConnectionResetError) as exc:
            answer = repr(exc).encode()
        assert answer != b"hello"
