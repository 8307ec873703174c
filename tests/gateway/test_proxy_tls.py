"""Proxy mode to an HTTPS upstream of a private CA: `--upstream-ca` trusts that CA alone, host name checked.

Every upstream here is a real TLS server with certificates the test makes. A handshake the gateway
cannot verify (no CA given, another CA, a wrong host, an expired certificate) is 503
`upstream_unavailable` with the fixed message, the reason in the log, and not one request reaching the
upstream. A bad `--upstream-ca` is one line and exit 2 from `fencegate serve`, before anything starts.
"""

from __future__ import annotations

import json
import ssl
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from fencegate.cli import main
from fencegate.lab.cluster.certs import Authority, KeyPair
from gateway.config import Settings
from tests.gateway.conftest import MakeClient
from tests.gateway.test_config import parse


class TLSUpstream:
    """HTTPS upstreams that record what reached them, each serving a certificate the test chose."""

    def __init__(self, aiohttp_server: Any) -> None:
        self._serve = aiohttp_server
        self.reached: list[str] = []

    async def _record(self, request: web.Request) -> web.Response:
        self.reached.append(f"{request.method} {request.path} {await request.read()!r}")
        return web.Response(status=201)

    async def start(self, server_cert: KeyPair) -> str:
        """Serve `server_cert`; the upstream URL (https://127.0.0.1:PORT/store)."""
        app = web.Application()
        app.router.add_route("*", "/store/{key:.*}", self._record)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(server_cert.cert, server_cert.key)
        server: TestServer = await self._serve(app, ssl=context)
        url = str(server.make_url("/store"))
        assert url.startswith("https://127.0.0.1:")
        return url


@pytest.fixture
def private_ca(tmp_path: Path) -> Authority:
    return Authority(tmp_path / "private-ca", name="fencegate test private CA")


@pytest.fixture
def tls_upstream(aiohttp_server: Any) -> TLSUpstream:
    return TLSUpstream(aiohttp_server)


async def test_an_upstream_of_a_private_ca_is_reached_only_with_upstream_ca(
    make_client: MakeClient, private_ca: Authority, tls_upstream: TLSUpstream
) -> None:
    url = await tls_upstream.start(private_ca.issue("upstream"))
    without = await make_client(upstream=url, upstream_timeout=5.0)
    refused = await without.put("/v1/objects/doc", data=b"v1", headers={"Fencing-Token": "1"})
    assert (refused.status, (await refused.json())["error"]) == (503, "upstream_unavailable")
    assert tls_upstream.reached == []  # the system's store does not know the private CA
    await without.close()

    trusting = await make_client(upstream=url, upstream_timeout=5.0, upstream_ca=private_ca.cert)
    written = await trusting.put("/v1/objects/doc", data=b"v2", headers={"Fencing-Token": "2"})
    assert written.status == 201, await written.text()
    assert tls_upstream.reached == ["PUT /store/doc b'v2'"]


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("another CA", "unable to get local issuer certificate"),
        ("wrong host", "certificate is not valid for '127.0.0.1'"),
        ("expired", "certificate has expired"),
    ],
)
async def test_an_upstream_certificate_upstream_ca_does_not_vouch_for_is_503_and_nothing_is_sent(
    make_client: MakeClient,
    private_ca: Authority,
    tls_upstream: TLSUpstream,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    kind: str,
    reason: str,
) -> None:
    """Another CA's certificate for the right host; the right CA's for another host, or expired."""
    if kind == "another CA":
        server_cert = Authority(tmp_path / "other-ca", name="another CA").issue("upstream")
    elif kind == "wrong host":
        server_cert = private_ca.issue("upstream", hosts=("elsewhere.test",))
    else:
        server_cert = private_ca.issue("upstream", expired=True)
    url = await tls_upstream.start(server_cert)
    proxy = await make_client(upstream=url, upstream_timeout=5.0, upstream_ca=private_ca.cert)
    with caplog.at_level("INFO", logger="gateway"):
        for method in ("PUT", "GET", "DELETE"):
            answer = await proxy.request(method, "/v1/objects/doc", data=b"x", headers={"Fencing-Token": "1"})
            text = await answer.text()
            assert (answer.status, json.loads(text)["error"]) == (503, "upstream_unavailable"), text
            assert url.split(":")[-1].split("/")[0] not in text  # no address in the body
            assert "certificate" not in text.lower()  # nor the handshake's words
    assert tls_upstream.reached == []
    assert any(reason in record.getMessage() for record in caplog.records)  # the reason is in the log


def test_upstream_ca_is_a_setting_from_the_flag_and_the_environment(private_ca: Authority) -> None:
    from gateway.config import settings_from

    env = {"FENCEGATE_UPSTREAM": "https://store.test/objects", "FENCEGATE_UPSTREAM_CA": str(private_ca.cert)}
    assert settings_from(parse(), env).upstream_ca == private_ca.cert
    assert settings_from(parse("--upstream-ca", str(private_ca.cert)), env).upstream_ca == private_ca.cert
    assert Settings().upstream_ca is None  # the default: the system's store


def _revocation_list(path: Path) -> Path:
    """A PEM file holding an empty certificate revocation list and no certificate: OpenSSL loads it."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "revoker")]))
        .last_update(now)
        .next_update(now + dt.timedelta(days=1))
        .sign(ec.generate_private_key(ec.SECP256R1()), hashes.SHA256())
    )
    path.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    return path


def _serve(tmp_path: Path, *extra: str) -> list[str]:
    return ["serve", "--port", "0", "--data-dir", str(tmp_path / "data"), *extra]


@pytest.mark.parametrize(
    ("upstream", "ca_file", "message"),
    [
        (None, "ca", "--upstream-ca needs an https upstream: give --upstream https://"),
        ("http://127.0.0.1:9000/store", "ca", "--upstream-ca needs an https upstream"),
        ("https://127.0.0.1:9000/store", "missing", "cannot load the upstream CA {path}: [Errno 2]"),
        ("https://127.0.0.1:9000/store", "directory", "cannot load the upstream CA {path}: [Errno 21]"),
        ("https://127.0.0.1:9000/store", "text", "cannot load the upstream CA {path}: [X509"),
        ("https://127.0.0.1:9000/store", "empty", "cannot load the upstream CA {path}: [X509"),
        ("https://127.0.0.1:9000/store", "key only", "cannot load the upstream CA {path}: [X509"),
        ("https://127.0.0.1:9000/store", "crl only", "cannot load the upstream CA {path}: it holds no"),
    ],
)
def test_a_bad_upstream_ca_is_one_line_and_exit_2_before_anything_starts(
    tmp_path: Path,
    private_ca: Authority,
    capsys: pytest.CaptureFixture[str],
    upstream: str | None,
    ca_file: str,
    message: str,
) -> None:
    pair = private_ca.issue("client", server=False, client=True)
    paths = {
        "ca": private_ca.cert,
        "missing": tmp_path / "missing.pem",
        "directory": tmp_path,
        "text": tmp_path / "text.pem",
        "empty": tmp_path / "empty.pem",
        "key only": pair.key,
        "crl only": _revocation_list(tmp_path / "crl.pem"),
    }
    (tmp_path / "text.pem").write_text("not a certificate\n")
    (tmp_path / "empty.pem").write_bytes(b"")
    path = paths[ca_file]
    argv = _serve(tmp_path, "--upstream-ca", str(path), *(("--upstream", upstream) if upstream else ()))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fencegate serve: {message.format(path=path)}"), err
    assert "give" in err  # the fix
    assert "\n" not in err  # one line: nothing was logged before it
    assert not (tmp_path / "data").exists()  # refused before the data dir was made
