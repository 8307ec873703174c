"""The gateway over TLS, with real handshakes against a real `fencegate serve`.

Certificates come from a throwaway CA made per test (`fencegate.lab.cluster.certs`):
HTTPS works for a client that trusts the CA and fails for one that does not;
with `--tls-client-ca` a client without a certificate, or with one of another
CA, gets no answer at all, and one with a certificate of the CA is the client
its subject CN names: the API key entry of that name, whose scopes apply.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from fencegate.cli import main
from fencegate.lab.cluster.certs import Authority, KeyPair
from tests.tls_gateway import TLSGateways


class Pki:
    """A CA the gateway trusts, a stranger CA, the gateway's certificate and clients' certificates."""

    def __init__(self, directory: Path) -> None:
        self.ca = Authority(directory / "ca")
        self.stranger = Authority(directory / "stranger", name="another CA")
        self.server = self.ca.issue("gateway")
        self.billing = self.ca.issue("billing", hosts=(), server=False, client=True)
        self.nobody = self.ca.issue("nobody", hosts=(), server=False, client=True)
        self.forged = self.stranger.issue("billing", hosts=(), server=False, client=True)

    def client(self, *, trust: Authority | None = None, cert: KeyPair | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str((trust or self.ca).cert))
        if cert is not None:
            context.load_cert_chain(cert.cert, cert.key)
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path / "pki")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        yield http


async def call(
    http: aiohttp.ClientSession, method: str, url: str, context: ssl.SSLContext, **headers: str
) -> tuple[int, dict[str, object]]:
    fenced = {"Fencing-Token": "1", **headers} if method != "GET" else headers
    async with http.request(method, url, data=b"x", headers=fenced, ssl=context) as resp:
        return resp.status, await resp.json()


async def test_https_with_a_trusted_ca_works_and_an_untrusted_one_fails(
    tls_gateways: TLSGateways, pki: Pki, session: aiohttp.ClientSession
) -> None:
    url = tls_gateways.start(pki.server)
    assert url.startswith("https://127.0.0.1:")
    status, body = await call(session, "PUT", f"{url}/v1/objects/doc", pki.client())
    assert (status, body["token"]) == (201, 1)
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await call(session, "PUT", f"{url}/v1/objects/doc", pki.client(trust=pki.stranger))
    with pytest.raises(aiohttp.ClientError):  # plain HTTP gets no answer either
        await call(session, "GET", url.replace("https://", "http://") + "/v1/fences/doc", pki.client())
    status, body = await call(session, "GET", f"{url}/v1/fences/doc", pki.client())
    assert (status, body["highest"]) == (200, 1)


@pytest.fixture
def keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    """billing may write under billing/; reader may read everything (its secret); no entry is nobody."""
    path = tmp_path / "keys.json"
    assert main(["keys", "--file", str(path), "add", "billing", "--prefix", "billing/"]) == 0
    capsys.readouterr()
    assert main(["keys", "--file", str(path), "add", "reader", "--prefix", "", "--read-only"]) == 0
    return path, capsys.readouterr().out.strip()


async def test_mutual_tls_refuses_clients_without_a_certificate_of_the_ca_and_names_the_others(
    tls_gateways: TLSGateways,
    pki: Pki,
    keys: tuple[Path, str],
    session: aiohttp.ClientSession,
) -> None:
    path, reader = keys
    url = tls_gateways.start(pki.server, "--tls-client-ca", str(pki.ca.cert), "--api-keys", str(path))
    for nameless in (pki.client(), pki.client(cert=pki.forged)):  # no certificate; another CA's
        with pytest.raises(aiohttp.ClientError):
            await call(session, "PUT", f"{url}/v1/objects/billing/1", nameless)

    billing = pki.client(cert=pki.billing)
    status, body = await call(session, "PUT", f"{url}/v1/objects/billing/1", billing)
    assert status == 201, body
    status, body = await call(session, "PUT", f"{url}/v1/objects/payroll/1", billing)  # its scope applies
    assert (status, body["error"]) == (403, "forbidden")
    assert "'billing'" in str(body["detail"])

    status, body = await call(session, "PUT", f"{url}/v1/objects/billing/2", pki.client(cert=pki.nobody))
    assert (status, body["error"]) == (401, "unauthorized")
    assert "'nobody' names no API key" in str(body["detail"])
    status, body = await call(
        session, "PUT", f"{url}/v1/objects/billing/3", billing, Authorization="Bearer no"
    )
    assert (status, body["error"]) == (401, "unauthorized")  # a bearer key decides alone, even a wrong one
    as_reader = {"Authorization": f"Bearer {reader}"}
    status, body = await call(session, "PUT", f"{url}/v1/objects/billing/4", billing, **as_reader)
    assert (status, body["error"], body["access"]) == (403, "forbidden", "write")  # the reader's access

    for written, mark in (
        ("billing/1", 1),
        ("billing/2", 0),
        ("billing/3", 0),
        ("billing/4", 0),
        ("payroll/1", 0),
    ):
        status, body = await call(session, "GET", f"{url}/v1/fences/{written}", billing, **as_reader)
        assert (status, body["highest"]) == (200, mark), written  # nothing refused was written


async def test_mutual_tls_without_a_key_file_names_the_client_by_its_certificate(
    tls_gateways: TLSGateways, pki: Pki, session: aiohttp.ClientSession
) -> None:
    url = tls_gateways.start(pki.server, "--tls-client-ca", str(pki.ca.cert))
    status, body = await call(session, "PUT", f"{url}/v1/objects/payroll/1", pki.client(cert=pki.billing))
    assert status == 201, body
    async with session.put(f"{url}/v1/objects/payroll/1", data=b"x", ssl=pki.client(cert=pki.nobody)) as resp:
        assert resp.status == 428  # refused, and logged under the certificate's name
    log = tls_gateways.started[0].log_path.read_text()
    assert '"client": "cert:nobody"' in log
    assert "client certificates required" in log
