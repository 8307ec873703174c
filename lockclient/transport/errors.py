"""How a request or a connection to a master can fail, beyond Python's own exceptions; TLS failures in words.

Python's classes are used where they mean the same thing (`TimeoutError`,
`ConnectionRefusedError`, `ConnectionResetError`, `ConnectionAbortedError`);
these add what it has no class for. `lockclient.transport.fanout` lists them
all, with what each means for a master.
"""

from __future__ import annotations

import re
import ssl

__all__ = ["AuthenticationError", "ConnectTimeout", "TLSError", "describe_tls", "refused_client_certificate"]


class TLSError(ConnectionError):
    """TLS failed: the master's certificate (CA, expiry, host name), or the master refused ours.

    A setting to fix, not an outage; the message says which.
    """


class AuthenticationError(ConnectionError):
    """The master refused the URL's login (AUTH) or database (SELECT)."""


class ConnectTimeout(ConnectionError):
    """A connection (with its TLS handshake and login) did not open within its timeout."""


# What an OpenSSL verify code means for whoever has to fix it.
_VERIFY_HINTS = {
    2: "it is not signed by a CA in ssl_ca_certs",
    7: "it is not signed by a CA in ssl_ca_certs",
    18: "it is self-signed: put it, or the CA that signed it, in ssl_ca_certs",
    19: "it is not signed by a CA in ssl_ca_certs",
    20: "it is not signed by a CA in ssl_ca_certs",
    21: "it is not signed by a CA in ssl_ca_certs",
    9: "it is not valid yet: check the clocks of this machine and of the one that issued it",
    10: "renew the master's certificate, or check this machine's clock",
    26: "it is not a server certificate",
    62: "reach the master by a name its certificate lists",
    64: "reach the master by an address its certificate lists",
}
# What an alert or an OpenSSL reason means, for the failures met without a verify code.
_REASON_HINTS = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": (
        "the master requires a client certificate: give ssl_certfile and ssl_keyfile"
    ),
    "SSLV3_ALERT_HANDSHAKE_FAILURE": (
        "the master refused the handshake: does it require a client certificate?"
    ),
    "SSLV3_ALERT_BAD_CERTIFICATE": "the master refused the client certificate (ssl_certfile)",
    "TLSV1_ALERT_UNKNOWN_CA": (
        "the master does not trust the CA that signed the client certificate (ssl_certfile)"
    ),
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the client certificate (ssl_certfile) has expired",
    "WRONG_VERSION_NUMBER": "the master does not speak TLS on this port: is it a plaintext port (redis://)?",
    "RECORD_LAYER_FAILURE": "the master does not speak TLS on this port: is it a plaintext port (redis://)?",
    "PACKET_LENGTH_TOO_LONG": "the master does not speak TLS on this port: is it a plaintext port (redis://)?",
}


def describe_tls(exc: ssl.SSLError) -> str:
    """A TLS failure in words, with what to check."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        detail = str(exc.verify_message).rstrip(".")
        verify_hint = _VERIFY_HINTS.get(exc.verify_code, "check ssl_ca_certs and the master's certificate")
        return f"the master's certificate was refused: {detail} ({verify_hint})"
    if isinstance(exc, ssl.SSLEOFError):
        return (
            "the master closed the connection during the TLS handshake (does it speak TLS on this port, "
            "and does it require a client certificate?)"
        )
    hint = _REASON_HINTS.get(exc.reason or "")
    # "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required (_ssl.c:2580)" -> the words
    text = re.sub(r"^\[\w+: \w+\] | \(_ssl\.c:\d+\)$", "", str(exc.strerror or exc))
    return f"{text} ({hint})" if hint else text


def refused_client_certificate(given: bool) -> str:
    """Why a master hung up right after the TLS handshake: it refused the client's certificate, or
    wanted one (`given`: whether the client had one)."""
    if given:
        return "the master refused the client certificate: is it signed by a CA the master trusts?"
    return _REASON_HINTS["TLSV13_ALERT_CERTIFICATE_REQUIRED"]
