"""Client TLS for the connections lockclient opens (and storage's, see `postgres_tls`).

One way to make a context from certificate files, and one way to say why a
handshake failed (for the Redis masters, the token sources and the gateway
client alike). A context is made for each new connection, so a renewed
certificate file is used from the next connection on, without a restart
(libpq and redis-py read their files per connection too). Verification is
on unless a caller turns it off: the CA given is the only one trusted (the
system's store only when no CA file is named), and the server's host name
or address must be in its certificate.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable

from lockclient.errors import ConfigurationError

__all__ = ["MINIMUM_VERSION", "client_context", "explain", "explain_hang_up", "tls_version"]

MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2  # the floor libpq, asyncpg and ZooKeeper 3.8 use by default
# OpenSSL's verify codes that mean "not signed by a CA this client trusts"
UNTRUSTED = {
    2,  # X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT
    7,  # X509_V_ERR_CERT_SIGNATURE_FAILURE: a CA of the same name did not sign it
    18,  # X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT
    19,  # X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN
    20,  # X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY
    21,  # X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE
}
EXPIRED = 10  # X509_V_ERR_CERT_HAS_EXPIRED
NOT_YET_VALID = 9  # X509_V_ERR_CERT_NOT_YET_VALID
WRONG_HOST = {62, 64}  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
NOT_A_SERVER = 26  # X509_V_ERR_INVALID_PURPOSE
# alerts a server sends when it does not accept the client's certificate
CLIENT_REFUSED = {
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "TLSV1_ALERT_UNKNOWN_CA",
    "TLSV1_ALERT_ACCESS_DENIED",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED",
}
# what OpenSSL says when the server answered something that is not TLS (a plaintext port)
NOT_TLS = {"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"}
VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def tls_version(name: str, *, setting: str) -> ssl.TLSVersion:
    """`TLSv1.2` or `TLSv1.3` (the names libpq uses) as a TLS version."""
    try:
        return VERSIONS[name]
    except KeyError:
        raise ConfigurationError(f"{setting}={name!r} is not a TLS version: use TLSv1.2 or TLSv1.3") from None


def _load(what: str, path: str, load: Callable[[], None]) -> None:
    try:
        load()
    except OSError as exc:  # a missing file, no permission; ssl.SSLError: not PEM, a key that does not fit
        reason = exc.strerror or str(exc)
        raise ConfigurationError(f"TLS: cannot use {what} {path!r}: {reason}") from exc


def client_context(
    *,
    ca: str | None,
    cert: str | None = None,
    key: str | None = None,
    password: str | None = None,
    verify: bool = True,
    check_hostname: bool = True,
    crl: str | None = None,
    minimum: ssl.TLSVersion = MINIMUM_VERSION,
    maximum: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    """A client context: trusts `ca` (a PEM file; the system's CAs if None), shows `cert`/`key` if given.

    `verify=False` accepts any server certificate (encryption without
    authentication: a man in the middle can read everything); the host name
    is then not checked either. Unreadable files are a `ConfigurationError`
    naming the file.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = minimum
    if maximum is not None:
        context.maximum_version = maximum
    if verify:
        context.check_hostname = check_hostname
        if ca is None:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            _load("the CA file", ca, lambda: context.load_verify_locations(cafile=ca))
        if crl is not None:
            _load("the CRL file", crl, lambda: context.load_verify_locations(cafile=crl))
            context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    else:
        context.check_hostname = False  # must come before CERT_NONE
        context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        _load(
            "the client certificate",
            cert,
            lambda: context.load_cert_chain(cert, keyfile=key, password=password),
        )
    return context


def explain(
    exc: BaseException,
    *,
    peer: str = "server",
    ca: str = "the CA file",
    client: str = "a client certificate and key",
) -> str | None:
    """Why a TLS handshake failed, and what to change; None if `exc` is not a TLS failure.

    `peer` is what the other side is called ("master"), `ca` and `client` the
    settings that hold the trusted CA and the client certificate, so the fix
    names what the caller can change.
    """
    if isinstance(exc, ssl.SSLCertVerificationError):
        code, detail = exc.verify_code, str(exc.verify_message).rstrip(".")
        if code in WRONG_HOST:
            return (
                f"the {peer}'s certificate is not valid for the name connected to ({detail}): connect by a "
                "host name or address the certificate lists"
            )
        if code == EXPIRED:
            return f"the {peer}'s certificate has expired: renew it, or check this machine's clock"
        if code == NOT_YET_VALID:
            return (
                f"the {peer}'s certificate is not valid yet: check the clocks of this machine and of the one "
                "that issued it"
            )
        if code in UNTRUSTED:
            return (
                f"the {peer}'s certificate is not signed by the CA this client trusts ({detail}): {ca} must "
                "hold the CA that signed it"
            )
        if code == NOT_A_SERVER:
            return f"the {peer}'s certificate is not a server certificate ({detail})"
        return f"the {peer}'s certificate was refused: {detail}"
    if isinstance(exc, ssl.SSLEOFError):
        return (
            f"the {peer} closed the connection during the TLS handshake (does it speak TLS on this port, "
            "and does it require a client certificate?)"
        )
    if isinstance(exc, ssl.SSLError):
        if exc.reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED":
            return f"the {peer} requires a client certificate: give {client}"
        if exc.reason in CLIENT_REFUSED:
            return f"the {peer} refused the client's certificate ({exc.reason}): {_client_fix(peer, client)}"
        if exc.reason == "SSLV3_ALERT_HANDSHAKE_FAILURE":
            return f"the {peer} refused the handshake: does it require a client certificate?"
        if exc.reason in NOT_TLS:
            return f"the {peer} does not speak TLS on this port: is it a plaintext port?"
        # "[SSL: SOME_REASON] some reason (_ssl.c:2580)" -> the words
        words = re.sub(r"^\[\w+: \w+\] | \(_ssl\.c:\d+\)$", "", str(exc.strerror or exc))
        return f"the TLS handshake failed: {words}"
    return None


def explain_hang_up(
    *, gave_certificate: bool, peer: str = "server", client: str = "a client certificate and key"
) -> str:
    """Why a server hung up right after the handshake: with TLS 1.3 that is how it refuses the client's
    certificate (`gave_certificate`), or the lack of one; its alert is often lost to the reset."""
    if gave_certificate:
        return f"the {peer} refused the client's certificate: {_client_fix(peer, client)}"
    return f"the {peer} requires a client certificate: give {client}"


def _client_fix(peer: str, client: str) -> str:
    return f"it requires one signed by a CA the {peer} trusts; give {client}"
