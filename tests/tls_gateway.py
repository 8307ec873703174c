"""`fencegate serve` over HTTPS for a test: the `tls_gateways` fixture starts them and stops them after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fencegate.lab.cluster.certs import KeyPair
from fencegate.lab.cluster.gateway import GatewayProcess


class TLSGateways:
    """The gateways one test started, each with a certificate the test made."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self.started: list[GatewayProcess] = []

    def start(self, server: KeyPair, *extra: str) -> str:
        """Serve with `server`'s certificate and the `extra` flags; the gateway's https:// URL."""
        tls = ("--tls-cert", str(server.cert), "--tls-key", str(server.key))
        data = ("--data-dir", str(self._directory / "data"))
        gateway = GatewayProcess(self._directory / "gw.log", *data, *tls, *extra)
        self.started.append(gateway)
        return gateway.start()


@pytest.fixture
def tls_gateways(tmp_path: Path) -> Iterator[TLSGateways]:
    gateways = TLSGateways(tmp_path)
    yield gateways
    for gateway in gateways.started:
        gateway.stop()
