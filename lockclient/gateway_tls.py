"""TLS of the gateway client: its context from the `ssl_*` settings, and why a handshake failed.

The context is `lockclient.tls.client_context`'s, the one of every client
connection of the library; here are only the gateway client's rules about
when the settings apply (an https URL, no session of the caller's).
"""

from __future__ import annotations

import os
import ssl

import aiohttp

from lockclient.errors import ConfigurationError
from lockclient.tls import client_context, explain
from lockclient.transport.endpoint import redact

__all__ = ["TLSPath", "tls_context", "tls_failure"]

TLSPath = str | os.PathLike[str]


def tls_context(
    base_url: str,
    session: aiohttp.ClientSession | None,
    ca: TLSPath | None,
    cert: TLSPath | None,
    key: TLSPath | None,
) -> ssl.SSLContext | None:
    """The client context for the `ssl_*` settings; None when none is given (aiohttp's default then)."""
    if ca is None and cert is None and key is None:
        return None
    if not base_url.startswith("https://"):
        raise ConfigurationError(
            f"ssl_* settings need an https:// base_url, got {redact(base_url)!r}: use https://"
        )
    if session is not None:
        raise ConfigurationError("give either session= or the ssl_* settings: a session brings its own TLS")
    if key is not None and cert is None:
        raise ConfigurationError("ssl_keyfile belongs to a client certificate: give ssl_certfile too")
    return client_context(
        ca=None if ca is None else os.fspath(ca),
        cert=None if cert is None else os.fspath(cert),
        key=None if key is None else os.fspath(key),
    )


def tls_failure(exc: aiohttp.ClientError) -> str | None:
    """Why a TLS handshake with the gateway failed, in words; None when `exc` is no TLS failure."""
    for cause in (getattr(exc, "certificate_error", None), getattr(exc, "os_error", None), exc.__cause__):
        if isinstance(cause, BaseException) and (why := explain(cause)) is not None:
            return why
    return None
