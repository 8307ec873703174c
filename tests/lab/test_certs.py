"""The throwaway CA's certificates pass and fail real TLS handshakes as they should."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from fencegate.lab.cluster.certs import Authority, KeyPair
from tests.tls_greeting import GREETING, greeting_server, hello


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("ca"))


def _client(authority: Authority, pair: KeyPair | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=authority.cert)
    if pair is not None:
        context.load_cert_chain(pair.cert, pair.key)
    return context


async def test_a_server_certificate_is_trusted_through_the_ca_alone(authority: Authority) -> None:
    pair = authority.issue("server")
    async with greeting_server(pair.cert, pair.key) as port:
        assert await hello(port, _client(authority)) == GREETING
        assert await hello(port, _client(authority), host="localhost") == GREETING


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
    async with greeting_server(pair.cert, pair.key) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match=reason):
            await hello(port, _client(authority), host=host)


async def test_another_ca_is_refused(authority: Authority, tmp_path: Path) -> None:
    stranger = Authority(tmp_path / "other")
    pair = authority.issue("server-2")
    async with greeting_server(pair.cert, pair.key) as port:
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            await hello(port, _client(stranger))


async def test_a_server_that_requires_a_client_certificate_gets_one_from_the_ca(authority: Authority) -> None:
    client = authority.issue("alice", hosts=(), server=False, client=True)
    pair = authority.issue("server-3")
    async with greeting_server(pair.cert, pair.key, client_ca=authority.cert) as port:
        assert await hello(port, _client(authority, client)) == GREETING
        # TLS 1.3: the client's handshake ends before the server checks it; the refusal is an alert
        # on the first read, or a closed stream, never the greeting.
        try:
            answer = await hello(port, _client(authority))
        except (ssl.SSLError, ConnectionResetError) as exc:
            answer = repr(exc).encode()
        assert answer != GREETING
