"""Proxy mode to an HTTPS upstream of a private CA: `--upstream-ca` trusts that CA alone, host name checked;
`--upstream-cert`/`--upstream-key` are the client certificate for an upstream that requires mutual TLS.

Every upstream here is a real TLS server with certificates the test makes. A handshake the gateway
cannot verify (no CA given, another CA, a wrong host, an expired certificate) is 503
`upstream_unavailable` with the fixed message, the reason in the log, and not one request reaching the
upstream; so is a client certificate the upstream refuses (none, another CA's, expired, not for
clients). A bad `--upstream-ca`, `--upstream-cert` or `--upstream-key` is one line and exit 2 from
`fencegate serve`, before anything starts.
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
from gateway.tls import peer_name
from tests.gateway.conftest import MakeClient
from tests.gateway.test_config import parse


class TLSUpstream:
    """HTTPS upstreams that record what reached them, each serving a certificate the test chose."""

    def __init__(self, aiohttp_server: Any) -> None:
        self._serve = aiohttp_server
        self.reached: list[str] = []
        self.presented: list[str | None] = []  # the subject CN of each request's client certificate

    async def _record(self, request: web.Request) -> web.Response:
        self.reached.append(f"{request.method} {request.path} {await request.read()!r}")
        self.presented.append(peer_name(request))
        return web.Response(status=201)

    async def start(self, server_cert: KeyPair, *, client_ca: Path | None = None) -> str:
        """Serve `server_cert`, and with `client_ca` require a client certificate of that CA alone; the
        upstream URL (https://127.0.0.1:PORT/store)."""
        app = web.Application()
        app.router.add_route("*", "/store/{key:.*}", self._record)
        # with a cafile, only that CA vouches for clients; without, the system's store (no client asked)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=client_ca)
        if client_ca is not None:
            context.verify_mode = ssl.CERT_REQUIRED
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
    without = await make_client(upstream_ordering="trust-path", upstream=url, upstream_timeout=5.0)
    refused = await without.put("/v1/objects/doc", data=b"v1", headers={"Fencing-Token": "1"})
    assert (refused.status, (await refused.json())["error"]) == (503, "upstream_unavailable")
    assert tls_upstream.reached == []  # the system's store does not know the private CA
    await without.close()

    trusting = await make_client(
        upstream_ordering="trust-path", upstream=url, upstream_timeout=5.0, upstream_ca=private_ca.cert
    )
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
    proxy = await make_client(
        upstream_ordering="trust-path", upstream=url, upstream_timeout=5.0, upstream_ca=private_ca.cert
    )
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
    from gateway.settings_cli import settings_from

    env = {
        "FENCEGATE_UPSTREAM": "https://store.test/objects",
        "FENCEGATE_UPSTREAM_ORDERING": "trust-path",
        "FENCEGATE_UPSTREAM_CA": str(private_ca.cert),
    }
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


# --- mutual TLS to the upstream: --upstream-cert and --upstream-key ---------------------------------


@pytest.fixture
def gateway_pair(private_ca: Authority) -> KeyPair:
    """The client certificate the gateway presents, signed by the CA the upstream requires."""
    return private_ca.issue("fencegate-gateway", hosts=(), server=False, client=True)


@pytest.mark.parametrize("trust", ["--upstream-ca", "the system's store"])
async def test_an_upstream_requiring_a_client_certificate_is_reached_only_with_upstream_cert(
    make_client: MakeClient,
    private_ca: Authority,
    tls_upstream: TLSUpstream,
    gateway_pair: KeyPair,
    monkeypatch: pytest.MonkeyPatch,
    trust: str,
) -> None:
    """The gateway trusts the upstream's certificate either way; it is the client certificate that decides.
    Without `--upstream-ca` the system's store verifies the upstream: here the private CA is put in it
    (OpenSSL's SSL_CERT_FILE), as an operator adding it to the store would."""
    url = await tls_upstream.start(private_ca.issue("upstream"), client_ca=private_ca.cert)
    without = await make_client(
        upstream_ordering="trust-path", upstream=url, upstream_timeout=5.0, upstream_ca=private_ca.cert
    )
    refused = await without.put("/v1/objects/doc", data=b"v1", headers={"Fencing-Token": "1"})
    assert (refused.status, (await refused.json())["error"]) == (503, "upstream_unavailable")
    assert tls_upstream.reached == []  # no client certificate: the upstream took nothing
    await without.close()

    if trust == "--upstream-ca":
        trusting: dict[str, Any] = {"upstream_ca": private_ca.cert}
    else:
        monkeypatch.setenv("SSL_CERT_FILE", str(private_ca.cert))
        trusting = {}
    pair = {"upstream_cert": gateway_pair.cert, "upstream_key": gateway_pair.key}
    presenting = await make_client(
        upstream_ordering="trust-path", upstream=url, upstream_timeout=5.0, **trusting, **pair
    )
    written = await presenting.put("/v1/objects/doc", data=b"v2", headers={"Fencing-Token": "2"})
    assert written.status == 201, await written.text()
    assert tls_upstream.reached == ["PUT /store/doc b'v2'"]
    assert tls_upstream.presented == ["fencegate-gateway"]


@pytest.mark.parametrize("kind", ["another CA", "expired", "server only"])
async def test_a_client_certificate_the_upstream_does_not_accept_is_503_and_nothing_is_sent(
    make_client: MakeClient,
    private_ca: Authority,
    tls_upstream: TLSUpstream,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    """Another CA's client certificate; the right CA's, expired or without the client-auth usage."""
    if kind == "another CA":
        pair = Authority(tmp_path / "other-ca", name="another CA").issue("gw", hosts=(), client=True)
    elif kind == "expired":
        pair = private_ca.issue("gw", hosts=(), server=False, client=True, expired=True)
    else:
        pair = private_ca.issue("gw", hosts=(), server=True, client=False)
    url = await tls_upstream.start(private_ca.issue("upstream"), client_ca=private_ca.cert)
    proxy = await make_client(
        upstream_ordering="trust-path", upstream=url, upstream_timeout=5.0, upstream_ca=private_ca.cert,
        upstream_cert=pair.cert, upstream_key=pair.key,
    )  # fmt: skip
    secrets = [pair.key.read_text(), pair.cert.read_text(), str(pair.key), str(pair.cert)]
    with caplog.at_level("INFO", logger="gateway"):
        for method in ("PUT", "GET", "DELETE"):
            answer = await proxy.request(method, "/v1/objects/doc", data=b"x", headers={"Fencing-Token": "1"})
            text = await answer.text()
            assert (answer.status, json.loads(text)["error"]) == (503, "upstream_unavailable"), text
            assert "certificate" not in text.lower()  # no handshake's words
            assert "BEGIN" not in text
            assert not [secret for secret in secrets if secret in text]  # no key or certificate, nor its path
    assert tls_upstream.reached == []
    # With TLS 1.3 the upstream judges the certificate after the client's handshake: the gateway sees
    # the connection end, and logs that (the upstream's own log says why).
    assert any("the upstream is unreachable" in record.getMessage() for record in caplog.records)


def test_upstream_cert_and_key_are_settings_from_the_flags_and_the_environment(
    gateway_pair: KeyPair, capsys: pytest.CaptureFixture[str]
) -> None:
    from gateway.settings_cli import settings_from

    cert, key = str(gateway_pair.cert), str(gateway_pair.key)
    env = {"FENCEGATE_UPSTREAM": "https://store.test/objects", "FENCEGATE_UPSTREAM_ORDERING": "trust-path"}
    from_env = {**env, "FENCEGATE_UPSTREAM_CERT": cert, "FENCEGATE_UPSTREAM_KEY": key}
    for settings in (
        settings_from(parse(), from_env),
        settings_from(parse("--upstream-cert", cert, "--upstream-key", key), env),
    ):
        assert (settings.upstream_cert, settings.upstream_key) == (gateway_pair.cert, gateway_pair.key)
    assert (Settings().upstream_cert, Settings().upstream_key) == (None, None)  # the default: none presented
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for flag in ("--upstream-cert", "--upstream-key"):
        variable = "FENCEGATE_" + flag.removeprefix("--").replace("-", "_").upper()
        described = shown.rsplit(f"{flag} PATH ", 1)[1]  # the last: its help, after the usage line
        assert described.split("(default: ", 1)[1].startswith(f"unset; env {variable})"), described[:300]


HTTPS = ("--upstream", "https://127.0.0.1:9000/store", "--upstream-ordering", "trust-path")
PAIR = ("--upstream-cert", "cert", "--upstream-key", "key")
CANNOT = "cannot load the upstream client certificate"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--upstream-cert", "cert", *HTTPS), "give --upstream-cert and --upstream-key together"),
        (("--upstream-key", "key", *HTTPS), "give --upstream-cert and --upstream-key together"),
        (PAIR, "--upstream-cert and --upstream-key need an https upstream: give --upstream https://"),
        ((*PAIR, "--upstream", "http://127.0.0.1:9000/store"), "--upstream-cert and --upstream-key need an"),
        (("--upstream-ca", "ca", *PAIR), "--upstream-ca, --upstream-cert and --upstream-key need an https"),
        (("--upstream-cert", "missing", "--upstream-key", "key", *HTTPS), CANNOT + " {missing} with the key "
         "{key}: [Errno 2]"),
        (("--upstream-cert", "cert", "--upstream-key", "missing", *HTTPS), CANNOT + " {cert} with the key "
         "{missing}: [Errno 2]"),
        (("--upstream-cert", "cert", "--upstream-key", "directory", *HTTPS), CANNOT + " {cert} with the key "
         "{directory}: [Errno 21]"),
        (("--upstream-cert", "text", "--upstream-key", "key", *HTTPS), CANNOT + " {text} with the key {key}: "
         "[SSL"),
        (("--upstream-cert", "cert", "--upstream-key", "other key", *HTTPS), CANNOT + " {cert} with the key "
         "{other key}: [X509: KEY_VALUES_MISMATCH]"),
        ((*PAIR, "--upstream-ca", "text", *HTTPS), "cannot load the upstream CA {text}: [X509"),
    ],
    ids=["cert-alone", "key-alone", "no-upstream", "http-upstream", "ca-too-no-upstream", "missing-cert",
         "missing-key", "key-a-directory", "cert-not-pem", "key-of-another-cert", "bad-ca-with-a-good-pair"],
)  # fmt: skip
def test_a_bad_upstream_cert_or_key_is_one_line_and_exit_2_before_anything_starts(
    tmp_path: Path,
    private_ca: Authority,
    gateway_pair: KeyPair,
    capsys: pytest.CaptureFixture[str],
    flags: tuple[str, ...],
    message: str,
) -> None:
    (tmp_path / "text.pem").write_text("not a certificate\n")
    paths = {
        "ca": private_ca.cert,
        "cert": gateway_pair.cert,
        "key": gateway_pair.key,
        "other key": private_ca.issue("other", hosts=(), client=True).key,
        "missing": tmp_path / "missing.pem",
        "directory": tmp_path,
        "text": tmp_path / "text.pem",
    }
    argv = _serve(tmp_path, *(str(paths.get(flag, flag)) for flag in flags))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fencegate serve: {message.format_map(paths)}"), err
    assert "give" in err or "drop" in err  # the fix
    assert "\n" not in err  # one line: nothing was logged before it
    assert "PRIVATE KEY" not in err  # the paths, never the key
    assert not (tmp_path / "data").exists()  # refused before the data dir was made
