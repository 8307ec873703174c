"""Where a master listens and how to reach it, read from its URL: address, login, database, TLS.

`redis://[user:password@]host[:port][/db]`, `rediss://...` (TLS) and
`unix:///path[?db=n]`. A `rediss://` URL takes redis-py's TLS query
parameters (`ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`, `ssl_cert_reqs`,
`ssl_check_hostname`), which win over the `TLSSettings` given for every
master. Every other parameter is refused, not ignored: a misspelt TLS
setting must not quietly weaken the connection. TLS is never inferred or
dropped: a plaintext URL with TLS settings is an error, and a `rediss://`
master is only ever spoken to over TLS.

Errors are `ValueError`s that say what to fix; the caller names the master.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from lockclient.config import TLSSettings
from lockclient.errors import ConfigurationError
from lockclient.tls import client_context
from lockclient.transport.codec import pack

__all__ = ["SCHEMES", "URL_PARAMETERS", "Endpoint", "redact", "tls_context"]

SCHEMES = ("redis", "rediss", "unix")
_FALSE = ("0", "false", "f", "no", "n", "off")
_TRUE = ("1", "true", "t", "yes", "y", "on")


def _flag(value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"{value!r} is not true or false")


def _same(value: str) -> str:
    return value


# the TLS query parameters, each read into the TLSSettings field of the same name
_TLS_PARAMETERS: dict[str, Callable[[str], Any]] = {
    "ssl_ca_certs": _same,
    "ssl_certfile": _same,
    "ssl_keyfile": _same,
    "ssl_cert_reqs": _same,  # checked by TLSSettings
    "ssl_check_hostname": _flag,
}
URL_PARAMETERS = ("db", *_TLS_PARAMETERS)


def is_http_url(url: str) -> bool:
    """Whether `url` is http(s) with a host and, if it names one, a port from 1 to 65535; never raises."""
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError when it is no number or out of range
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and port != 0


def redact(url: str) -> str:
    """`url` as messages and logs name a master, a token source or a storage: its password as `***`,
    without its query (settings). Any string, even one that is no URL (an unclosed `[::1`), is masked:
    the message naming a bad URL must not be the one that shows its password."""
    scheme, sep, rest = url.partition("://")
    if not sep:  # no scheme: `user:password@host` is still a login
        rest = url
    # the login first, then the query and fragment: a password may hold an unencoded '#' or '?'
    # (`redis://:pa#ss@host`), and cutting there first would show its start as the URL. Everything up
    # to the last '@' counts as the login, so an '@' in a query may mask more than needed, never less.
    userinfo, at, host = rest.rpartition("@")
    if at and ":" in userinfo:
        rest = f"{userinfo.partition(':')[0]}:***@{host}"
    rest = rest.partition("#")[0].partition("?")[0]
    return f"{scheme}{sep}{rest}" if sep else rest


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A master's address, login and database, and its TLS settings if it is spoken to over TLS."""

    host: str = "localhost"
    port: int = 6379
    path: str | None = None  # a unix socket
    tls: TLSSettings | None = None  # None: plaintext
    username: str | None = None
    password: str | None = None
    db: int = 0

    @classmethod
    def from_url(cls, url: str, *, tls: TLSSettings | None = None) -> Endpoint:
        """Read `url`; `tls` are the settings of every `rediss://` master, which its URL may override."""
        try:
            parts = urlsplit(url)
        except ValueError as exc:  # an unclosed [IPv6 address]
            raise ValueError(
                f"it cannot be read as a URL ({exc}): write redis://host:port, an IPv6 address "
                "in brackets (redis://[::1]:6379)"
            ) from None
        if parts.scheme not in SCHEMES:
            raise ValueError(
                "it is not a Redis URL: use redis://host:port, rediss://host:port or unix:///path"
            )
        query = _query(parts.query)
        overrides = {name: query.pop(name) for name in list(query) if name in _TLS_PARAMETERS}
        if query.keys() - {"db"}:
            unknown = ", ".join(sorted(query.keys() - {"db"}))
            raise ValueError(
                f"it has query parameters lockclient does not read ({unknown}): it reads "
                f"{', '.join(URL_PARAMETERS)}; timeouts are the Redlock's node_timeout"
            )
        if parts.scheme != "rediss" and (overrides or tls is not None):
            given = ", ".join(overrides) if overrides else "TLS settings"
            raise ValueError(
                f"it is a plaintext URL but {given} were given: use rediss:// for a master reached over "
                "TLS (a plaintext connection is never made in its place)"
            )
        username = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password else None
        default_db = parts.path.lstrip("/") if parts.scheme != "unix" else ""
        db_text = query.get("db", default_db) or "0"
        try:
            db = int(db_text)
        except ValueError:
            raise ValueError(f"its database {db_text!r} is not a number: use /0 .. /15 or ?db=n") from None
        if parts.scheme == "unix":
            return cls(path=parts.path, username=username, password=password, db=db)
        try:
            port = parts.port or 6379
        except ValueError:
            # not `exc`: it quotes the port as read, which is part of the password when the password
            # holds an unencoded '#', '?' or '/' (`redis://:pa#ss@host` reads as port `pa`)
            raise ValueError(
                "its port is not valid: give a number from 1 to 65535, and percent-encode any "
                "'#', '?', '/' or '@' in the login (e.g. '#' as %23)"
            ) from None
        settings = None
        if parts.scheme == "rediss":
            settings = _with_overrides(tls or TLSSettings(), overrides)
        return cls(
            host=parts.hostname or "localhost", port=port, tls=settings,
            username=username, password=password, db=db,
        )  # fmt: skip

    def handshake(self) -> list[bytes]:
        """The commands a new connection sends before any other.

        AUTH and SELECT when needed; over TLS at least a PING, so a master that
        refuses the client's certificate (TLS 1.3 says so only after the
        handshake) is found while connecting, as a TLS failure, and not by the
        first command of a lock.
        """
        commands = []
        if self.password is not None:
            auth = (self.username, self.password) if self.username else (self.password,)
            commands.append(pack("AUTH", *auth))
        if self.db:
            commands.append(pack("SELECT", self.db))
        if self.tls is not None and not commands:
            commands.append(pack("PING"))
        return commands


def _query(text: str) -> dict[str, str]:
    found = parse_qs(text, keep_blank_values=True, strict_parsing=False)
    repeated = [name for name, values in found.items() if len(values) > 1]
    if repeated:
        raise ValueError(f"it gives {', '.join(repeated)} more than once: give each parameter once")
    return {name: values[0] for name, values in found.items()}


def _with_overrides(base: TLSSettings, overrides: dict[str, str]) -> TLSSettings:
    fields: dict[str, Any] = {}
    for name, text in overrides.items():
        try:
            fields[name] = _TLS_PARAMETERS[name](text)
        except ValueError as exc:
            raise ValueError(f"its {name} is not valid ({exc})") from None
    try:
        return dataclasses.replace(base, **fields)
    except ConfigurationError as exc:
        raise ValueError(str(exc)) from None


def tls_context(settings: TLSSettings) -> ssl.SSLContext:
    """An SSL context for `settings` (`lockclient.tls.client_context`); `ValueError` naming the file
    that cannot be used."""
    verify = settings.ssl_cert_reqs != "none"
    try:
        context = client_context(
            ca=None if settings.ssl_ca_certs is None else str(settings.ssl_ca_certs),
            cert=None if settings.ssl_certfile is None else str(settings.ssl_certfile),
            key=None if settings.ssl_keyfile is None else str(settings.ssl_keyfile),
            verify=verify,
            check_hostname=settings.checks_hostname,
        )
    except ConfigurationError as exc:
        why = exc.__cause__  # the OSError (or ssl.SSLError) that says why
        if str(exc).startswith("TLS: cannot use the CA file"):
            raise ValueError(
                f"ssl_ca_certs {str(settings.ssl_ca_certs)!r} cannot be used as CA certificates: {why}"
            ) from None
        names = ", ".join(str(f) for f in (settings.ssl_certfile, settings.ssl_keyfile) if f is not None)
        raise ValueError(
            f"the client certificate ({names}) cannot be used: {why}; "
            "ssl_certfile must hold a PEM certificate and ssl_keyfile its private key"
        ) from None
    if settings.ssl_cert_reqs == "optional":
        context.verify_mode = ssl.CERT_OPTIONAL
    return context
