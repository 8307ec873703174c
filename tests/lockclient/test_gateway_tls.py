"""`GatewayClient` over HTTPS against a real `fencegate serve` with certificates made per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencegate.lab.cluster.certs import Authority
from lockclient import ConfigurationError, GatewayClient, GatewayError
from tests.tls_gateway import TLSGateways


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return Authority(tmp_path / "ca")


async def test_https_with_the_gateways_ca_writes_and_another_ca_is_refused_with_the_reason(
    tls_gateways: TLSGateways, tmp_path: Path, ca: Authority
) -> None:
    url = tls_gateways.start(ca.issue("gateway"))
    assert url.startswith("https://")
    async with GatewayClient(url, ssl_ca_certs=ca.cert) as gateway:
        written = await gateway.put("docs/a", b"over tls", token=1, resource="docs")
        assert written.token == 1
        assert (await gateway.get("docs/a")).data == b"over tls"
    stranger = Authority(tmp_path / "stranger", name="another CA")
    async with GatewayClient(url, ssl_ca_certs=stranger.cert) as gateway:
        with pytest.raises(GatewayError, match="not signed by the CA this client trusts") as refused:
            await gateway.put("docs/a", b"to a stranger", token=2, resource="docs")
    assert (refused.value.status, refused.value.code) == (None, "tls")
    async with GatewayClient(url, ssl_ca_certs=ca.cert) as gateway:
        assert (await gateway.get("docs/a")).data == b"over tls"  # the refused client sent nothing


async def test_a_gateway_that_requires_a_client_certificate_gets_one(
    tls_gateways: TLSGateways, ca: Authority
) -> None:
    url = tls_gateways.start(ca.issue("gateway"), "--tls-client-ca", str(ca.cert))
    client = ca.issue("billing", hosts=(), server=False, client=True)
    async with GatewayClient(
        url, ssl_ca_certs=ca.cert, ssl_certfile=client.cert, ssl_keyfile=client.key
    ) as gw:
        assert (await gw.put("payroll/1", b"x", token=1)).created
    async with GatewayClient(url, ssl_ca_certs=ca.cert) as gateway:  # no client certificate
        with pytest.raises(GatewayError) as refused:
            await gateway.put("payroll/1", b"y", token=2)
    assert refused.value.status is None  # no answer at all: the handshake (or the first read) failed
    if refused.value.code == "disconnected":  # TLS 1.3: the refusal reaches the client as a close
        assert "give ssl_certfile and ssl_keyfile" in str(refused.value)


def test_tls_settings_are_refused_where_they_cannot_apply(tmp_path: Path, ca: Authority) -> None:
    with pytest.raises(ConfigurationError, match="https://"):
        GatewayClient("http://127.0.0.1:8080", ssl_ca_certs=ca.cert)
    with pytest.raises(ConfigurationError, match="ssl_certfile"):
        GatewayClient("https://127.0.0.1:8080", ssl_keyfile=tmp_path / "client.key")
    with pytest.raises(ConfigurationError, match="CA file"):
        GatewayClient("https://127.0.0.1:8080", ssl_ca_certs=tmp_path / "missing.pem")
