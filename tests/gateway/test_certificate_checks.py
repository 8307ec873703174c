"""Every TLS hop refuses a certificate it cannot verify, and nothing is sent over it.

`GatewayClient` refuses an expired or wrong-host gateway certificate; a mutual-TLS gateway refuses an
expired client certificate, and a client certificate whose name the audit trail cannot hold is 401;
proxy mode refuses an upstream whose certificate it cannot verify.
"""

from __future__ import annotations

import datetime
import json
import ssl
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.certs import Authority, KeyPair
from lockclient import GatewayClient, GatewayError
from storage.models import MAX_CLIENT_LENGTH
from tests.gateway.conftest import MakeClient, create_database
from tests.tls_gateway import TLSGateways


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return Authority(tmp_path / "ca")


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("expired", "certificate has expired"), ("wrong-host", "not valid for the name connected to")],
)
async def test_gateway_client_refuses_an_expired_or_wrong_host_gateway_certificate(
    tls_gateways: TLSGateways, ca: Authority, kind: str, reason: str
) -> None:
    server = (
        ca.issue("gateway", expired=True)
        if kind == "expired"
        else ca.issue("gateway", hosts=("elsewhere.test",))
    )
    url = tls_gateways.start(server)
    async with GatewayClient(url, ssl_ca_certs=ca.cert, retry=None) as gateway:
        with pytest.raises(GatewayError, match=reason) as refused:
            await gateway.put("docs/a", b"to a stranger", token=1)
    assert (refused.value.status, refused.value.code) == (None, "tls")
    trusting = ssl.create_default_context(cafile=str(ca.cert))
    trusting.check_hostname, trusting.verify_mode = False, ssl.CERT_NONE  # to look, not to write
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{url}/v1/fences/docs/a", ssl=trusting) as answer,
    ):
        assert (await answer.json())["highest"] == 0  # the refused client sent nothing


async def test_mutual_tls_refuses_an_expired_client_certificate_of_its_own_ca(
    tls_gateways: TLSGateways, ca: Authority
) -> None:
    url = tls_gateways.start(ca.issue("gateway"), "--tls-client-ca", str(ca.cert))
    valid = ca.issue("billing", hosts=(), server=False, client=True)
    expired = ca.issue("old-billing", hosts=(), server=False, client=True, expired=True)
    async with GatewayClient(
        url, ssl_ca_certs=ca.cert, ssl_certfile=expired.cert, ssl_keyfile=expired.key, retry=None
    ) as gateway:
        with pytest.raises(GatewayError) as refused:
            await gateway.put("payroll/1", b"x", token=1)
    assert refused.value.status is None  # no answer: the handshake (or, on TLS 1.3, the first read) failed
    async with GatewayClient(
        url, ssl_ca_certs=ca.cert, ssl_certfile=valid.cert, ssl_keyfile=valid.key, retry=None
    ) as gateway:
        assert (await gateway.fence("payroll/1")) == 0  # nothing was written
    assert '"client": "cert:old-billing"' not in tls_gateways.started[0].log_path.read_text()


def client_certificates(directory: Path, names: Sequence[str]) -> tuple[Path, list[KeyPair]]:
    """A client CA of the test's own, and a client certificate for each subject CN in `names`, unchecked:
    `cryptography` (and so `Authority.issue`) refuses a CN over X.509's 64 characters, but a CA is free
    to sign one, and OpenSSL verifies it as any other (a NUL in it too)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def signed(subject: x509.Name, key: ec.EllipticCurvePrivateKey, *, ca: bool) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)
        return builder.sign(ca_key, hashes.SHA256())

    def pem(path: Path, data: bytes) -> Path:
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    directory.mkdir()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "clients CA")])
    ca_cert = pem(
        directory / "ca.pem", signed(ca_name, ca_key, ca=True).public_bytes(serialization.Encoding.PEM)
    )
    pairs = []
    for i, name in enumerate(names):
        key = ec.generate_private_key(ec.SECP256R1())
        with warnings.catch_warnings():  # the length warning: that CN is what is being tested
            warnings.simplefilter("ignore", UserWarning)
            subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name, _validate=False)])
        cert = signed(subject, key, ca=False).public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        pairs.append(
            KeyPair(cert=pem(directory / f"{i}.crt", cert), key=pem(directory / f"{i}.key", key_pem))
        )
    return ca_cert, pairs


async def test_a_client_certificate_name_the_trail_cannot_hold_is_401_and_the_longest_writes(
    tls_gateways: TLSGateways, ca: Authority, tmp_path: Path, postgres_cluster: LocalCluster
) -> None:
    """Without a key file a mutual-TLS client is `cert:<CN>` in the audit trail and idempotency records
    (128 characters). X.509 bounds a CN at 64, which fits, but a CA may sign a longer one: a CN of 124
    characters or more made every write of its client 503 on PostgreSQL (`value too long`), and so did a
    NUL (no PostgreSQL text holds one), while SQLite took them. Now such a client is 401 with the fix,
    nothing is written, and the log has the reason; the longest CN that fits writes."""
    longest = MAX_CLIENT_LENGTH - len("cert:")
    fits = ["c" * 64, "c" * longest]
    refused = ["c" * (longest + 1), "c" * 1000, "nul\x00cn", "bell\x07cn", "two\nlines", " "]
    client_ca, pairs = client_certificates(tmp_path / "clients", [*fits, *refused])
    dsn = await create_database(postgres_cluster.postgres_dsn)
    url = tls_gateways.start(ca.issue("gateway"), "--tls-client-ca", str(client_ca), "--storage", dsn)

    def context(pair: KeyPair) -> ssl.SSLContext:
        trusting = ssl.create_default_context(cafile=str(ca.cert))
        trusting.load_cert_chain(pair.cert, pair.key)
        return trusting

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        for i, (name, pair) in enumerate(zip([*fits, *refused], pairs, strict=True)):
            for token, extra in ((1, {}), (2, {"Idempotency-Key": f"retry-{i}"})):
                headers = {"Fencing-Token": str(token), **extra}
                async with http.put(
                    f"{url}/v1/objects/r{i}", data=b"x", headers=headers, ssl=context(pair)
                ) as resp:
                    body = await resp.json()
                    if name in fits:
                        assert resp.status in (200, 201), (len(name), body)
                    else:
                        assert (resp.status, body["error"]) == (401, "unauthorized"), (name[:20], body)
                        assert f"CN is 1..{longest} printable characters" in body["detail"], body
            async with http.get(f"{url}/healthz", ssl=context(pair)) as probe:
                assert probe.status == 200  # a probe is answered whoever asks
        for i, name in enumerate([*fits, *refused]):
            async with http.get(f"{url}/v1/fences/r{i}", ssl=context(pairs[0])) as resp:
                assert (await resp.json())["highest"] == (2 if name in fits else 0), name[
                    :20
                ]  # nothing written
    log = tls_gateways.started[0].log_path.read_text()
    assert log.count("cannot name a client in the audit trail") == 2 * len(refused)


@pytest.fixture
async def tls_upstream(aiohttp_server: Any, tmp_path: Path) -> tuple[list[str], TestServer]:
    """An HTTPS upstream whose certificate no system store trusts; it records what reached it."""
    reached: list[str] = []

    async def record(request: web.Request) -> web.Response:
        reached.append(f"{request.method} {request.path}")
        return web.Response(status=201)

    app = web.Application()
    app.router.add_route("*", "/store/{key:.*}", record)
    server_cert = Authority(tmp_path / "upstream-ca").issue("upstream")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server_cert.cert, server_cert.key)
    server: TestServer = await aiohttp_server(app, ssl=context)
    return reached, server


async def test_proxy_mode_refuses_an_upstream_whose_certificate_it_cannot_verify(
    make_client: MakeClient, tls_upstream: tuple[list[str], TestServer]
) -> None:
    reached, server = tls_upstream
    upstream = str(server.make_url("/store"))
    assert upstream.startswith("https://")
    proxy = await make_client(upstream_ordering="trust-path", upstream=upstream, upstream_timeout=5.0)
    for method in ("PUT", "GET", "DELETE"):
        answer = await proxy.request(method, "/v1/objects/doc", data=b"x", headers={"Fencing-Token": "1"})
        text = await answer.text()
        assert (answer.status, json.loads(text)["error"]) == (503, "upstream_unavailable"), text
        assert str(server.port) not in text  # no address in the body
        assert "certificate" not in text.lower()  # nor the driver's words
    assert reached == []  # not one request was sent over the unverified connection
