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
"""

from __future__ import annotations

import ssl

from aiohttp import web

from gateway.config import Settings
from gateway.errors import ConfigurationError

MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2  # older versions have known weaknesses; every current client has 1.2


def server_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context `fencegate serve` listens with, or None for plain HTTP."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    # PROTOCOL_TLS_SERVER loads no CA at all (create_default_context would load the system's store
    # and accept client certificates of any public CA).
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MINIMUM_VERSION
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(
            f"cannot load the TLS certificate {settings.tls_cert} with the key {settings.tls_key}: {exc}; "
            "give the PEM certificate (chain) and its unencrypted PEM private key"
        ) from exc
    if settings.tls_client_ca is not None:
        try:
            context.load_verify_locations(cafile=settings.tls_client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"cannot load the client CA {settings.tls_client_ca}: {exc}; give the PEM certificate of "
                "the CA that signs the clients' certificates"
            ) from exc
        context.verify_mode = ssl.CERT_REQUIRED
    return context


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
