"""One cluster's TLS material: its throwaway CA, the certificates it issues, the TLS masters' login.

Everything is made on first use, in DIR/tls, and lives as long as the
cluster: a cluster that runs no TLS server never makes a key. Server
certificates name 127.0.0.1 (a Redis master's also `localhost`); each kind's
clients share one client certificate, named as that server wants it.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from fencegate.lab.cluster.certs import Authority, KeyPair
from fencegate.lab.cluster.errors import ClusterError
from fencegate.lab.cluster.servers import HOST, TLS_MODES, RedisTLS, ServerTLS

TLS_DIR = "tls"
TLS_USER = "fencegate"  # the ACL user of TLS masters started with `ClusterSpec(redis_tls=True)`
# the client certificate's name per kind: PostgreSQL's clientcert=verify-full wants the role's name
CLIENT_NAMES = {"postgres": "postgres", "zookeeper": "fencegate-client", "etcd": "fencegate-client"}


class ClusterTLS:
    """The CA of the cluster in `cluster_dir` and what it has issued so far."""

    def __init__(self, cluster_dir: Path) -> None:
        self._dir = cluster_dir / TLS_DIR
        self._authority: Authority | None = None
        self._client_certificate: KeyPair | None = None
        self._login: tuple[str, str] | None = None
        self._clients: dict[str, KeyPair] = {}

    @property
    def authority(self) -> Authority:
        """This cluster's throwaway CA (made on first use, in DIR/tls): it signs every TLS certificate."""
        if self._authority is None:
            self._authority = Authority(self._dir)
        return self._authority

    @property
    def client_certificate(self) -> KeyPair:
        """The client certificate TLS masters of this cluster require, signed by its CA."""
        if self._client_certificate is None:
            self._client_certificate = self.authority.issue("client", server=False, client=True)
        return self._client_certificate

    @property
    def login(self) -> tuple[str, str]:
        """The ACL user and password of `ClusterSpec(redis_tls=True)` masters (a fresh password)."""
        if self._login is None:
            self._login = (TLS_USER, secrets.token_hex(12))
        return self._login

    def redis(
        self, name: str, *, hosts: tuple[str, ...] = (HOST, "localhost"), expired: bool = False
    ) -> RedisTLS:
        """Certificates for a TLS master named `name`: its own from this cluster's CA (for `hosts`,
        `expired` if asked), requiring the cluster's client certificate."""
        server = self.authority.issue(name, hosts=hosts, expired=expired)
        return RedisTLS(ca=self.authority.cert, server=server, client=self.client_certificate)

    def server(self, name: str, kind: str, mode: str | None) -> ServerTLS | None:
        """Certificates for the TLS server `name` (valid for 127.0.0.1 only), or None for plaintext."""
        if mode is None:
            return None
        if mode not in TLS_MODES:
            raise ClusterError(f"TLS mode {mode!r} is not one of {', '.join(TLS_MODES)}")
        client = CLIENT_NAMES[kind]
        if client not in self._clients:
            self._clients[client] = self.authority.issue(client, hosts=(), server=False, client=True)
        server = self.authority.issue(f"{name}-server", hosts=(HOST,))
        return ServerTLS(self.authority.cert, server, self._clients[client], mutual=mode == "mutual")
