"""HTTPS for the gateway, and mutual TLS: who a client certificate names.

`--tls-cert`/`--tls-key` serve HTTPS (TLS 1.2 or newer). `--tls-client-ca`
also requires every client to present a certificate signed by that CA, and
only that CA: the system's trust store is never consulted for clients, so a
certificate from any public CA gets no handshake. The certificate's subject
common name (CN) is the client's name: with an API key file it names the
key entry whose scopes and access apply (`fencegate keys add NAME`), unless
the request sends `Authorization: Bearer`, which then decides alone;
without a key file, every certificate of the CA may use every name, and the
client is `cert:<CN>` in logs, the audit trail and the per-client limit.

In proxy mode, `--upstream-ca` is the one CA the gateway trusts for an https
upstream's certificate, as `--tls-client-ca` is for clients' (the host name
is still checked); without it, the system's store. `--upstream-cert` and
`--upstream-key` are the client certificate the gateway presents to an
upstream that requires mutual TLS.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from aiohttp import web

from gateway.errors import BadSetting
from lockclient.errors import ConfigurationError as ClientConfigurationError
from lockclient.tls import MINIMUM_VERSION, client_context


def server_context(cert: Path | None, key: Path | None, client_ca: Path | None) -> ssl.SSLContext | None:
    """The TLS context `fencegate serve` listens with (`--tls-cert`, `--tls-key`, `--tls-client-ca`), or
    None for plain HTTP."""
    if cert is None or key is None:
        return None
    # PROTOCOL_TLS_SERVER loads no CA at all (create_default_context would load the system's store
    # and accept client certificates of any public CA).
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MINIMUM_VERSION
    _present(context, cert, key, "TLS certificate")
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise BadSetting(
                f"cannot load the client CA {client_ca}: {exc}; give the PEM certificate of "
                "the CA that signs the clients' certificates"
            ) from exc
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def upstream_context(ca: Path | None, cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """The TLS context for an https upstream (`--upstream-ca`, `--upstream-cert`, `--upstream-key`), or
    None for aiohttp's default (the system's store, no client certificate) when none is given.

    With `ca` only that CA is trusted for the upstream's certificate: the system's store is not loaded (a
    certificate any public CA signed for the host gets no handshake). With `cert` and `key` the gateway
    presents that certificate to an upstream that requires mutual TLS. The host name is checked, TLS 1.2
    or newer. A file that cannot be read, a CA file with no certificate, or a key that is not the
    certificate's is a bad setting."""
    if ca is None and cert is None:
        return None
    fix = "give the PEM certificate of the CA that signs the upstream's certificate"
    try:
        # the one client context of the tree: with a CA file that file only; without, the system's store
        context = client_context(ca=None if ca is None else str(ca))
    except ClientConfigurationError as exc:
        raise BadSetting(f"cannot load the upstream CA {ca}: {exc.__cause__}; {fix}") from exc.__cause__
    # a file of revocation lists alone loads, and trusts nothing
    if ca is not None and not context.cert_store_stats()["x509"]:
        raise BadSetting(f"cannot load the upstream CA {ca}: it holds no certificate; {fix}")
    if cert is not None:
        _present(context, cert, key, "upstream client certificate")
    return context


def _present(context: ssl.SSLContext, cert: Path, key: Path | None, what: str) -> None:
    """Load the certificate `context` presents to its peers; a pair that does not load is a bad setting."""
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise BadSetting(
            f"cannot load the {what} {cert} with the key {key}: {exc}; "
            "give the PEM certificate (chain) and its unencrypted PEM private key"
        ) from exc


def peer_name(request: web.Request) -> str | None:
    """The subject CN of the client's verified certificate, if the connection presented one."""
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for attribute, value in rdn:
            if attribute == "commonName":
                return str(value)
    return None
