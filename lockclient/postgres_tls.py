"""libpq's TLS parameters in a PostgreSQL URL (`?sslmode=verify-full&sslrootcert=ca.pem`), for asyncpg.

Users write what libpq taught them. SQLAlchemy hands a URL's query to asyncpg
as keyword arguments, and asyncpg takes none of these as keywords, so
`split_tls` takes them out of the URL and `PostgresTLS.do_connect`, listening
to an engine's `do_connect` event, gives every new connection the matching
`ssl` context. The PostgreSQL token source and the gateway's storage both
connect this way. This module imports no driver (standard library only).

| parameter | meaning |
|---|---|
| `sslmode` (or `ssl`) | `disable` (the default), `require`, `verify-ca`, `verify-full` |
| `sslrootcert` | the CA file that signed the server's certificate, or `system` for the system's store |
| `sslcert`, `sslkey`, `sslpassword` | the client certificate, its key, the key's password |
| `sslcrl` | a certificate revocation list (PEM) |
| `ssl_min_protocol_version`, `ssl_max_protocol_version` | `TLSv1.2` (the default floor), `TLSv1.3` |
| `sslnegotiation` | `postgres` (the default) or `direct` (TLS first, PostgreSQL 17+) |

Where this differs from libpq, on purpose:
- Without `sslmode` the connection is plaintext (`disable`), not libpq's
  `prefer`; `prefer` and `allow` are refused. Both fall back to plaintext
  without a word, and `prefer` checks no certificate, so a man in the middle
  reads everything either way: TLS is a choice the URL states.
- `verify-ca` and `verify-full` need `sslrootcert`, and TLS files given
  without a `sslmode` that uses them are refused: no implicit
  `~/.postgresql` files, no `PGSSL*` variables. The URL alone says how a
  connection is made, on every machine it is used on.
- As in libpq, `require` with a `sslrootcert` also verifies the chain
  (`verify-ca`); `verify-full` also checks the host name.
A TLS failure is never retried in plaintext: it is a `TLSError` (a
`ConnectionError`) that says why (a CA that did not sign the server's
certificate, another host name, a client certificate the server wants).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from lockclient.errors import ConfigurationError, TLSError
from lockclient.tls import client_context, explain, tls_version

__all__ = ["MODES", "PostgresTLS", "split_tls"]

MODES = ("disable", "require", "verify-ca", "verify-full")
REFUSED = {
    "allow": "it tries plaintext first",
    "prefer": "it falls back to plaintext without a word and checks no certificate",
}
# URL parameter -> PostgresTLS field
PARAMETERS = {
    "sslmode": "mode",
    "ssl": "mode",  # what SQLAlchemy's asyncpg documentation writes
    "sslrootcert": "rootcert",
    "sslcert": "cert",
    "sslkey": "key",
    "sslpassword": "password",
    "sslcrl": "crl",
    "ssl_min_protocol_version": "min_version",
    "ssl_max_protocol_version": "max_version",
    "sslnegotiation": "negotiation",
}
SYSTEM = "system"  # sslrootcert=system: the system's CA store (libpq 16)


@dataclass(frozen=True, slots=True)
class PostgresTLS:
    """How to connect to PostgreSQL, from a URL's libpq TLS parameters (see the module docstring)."""

    mode: str = "disable"
    rootcert: str | None = None
    cert: str | None = None
    key: str | None = None
    password: str | None = field(default=None, repr=False)
    crl: str | None = None
    min_version: str | None = None
    max_version: str | None = None
    negotiation: str = "postgres"

    def __post_init__(self) -> None:
        if self.mode in REFUSED:
            raise ConfigurationError(
                f"sslmode={self.mode} is refused: {REFUSED[self.mode]}. Use sslmode=verify-full with "
                "sslrootcert=CA file to encrypt and authenticate the server, require to only encrypt, "
                "or disable for plaintext on a network you trust"
            )
        if self.mode not in MODES:
            raise ConfigurationError(f"sslmode={self.mode!r} is not one of {', '.join(MODES)}")
        given = [name for name, value in self._files().items() if value is not None]
        if self.mode == "disable" and given:
            raise ConfigurationError(
                f"{', '.join(given)} given but TLS is off: add sslmode=verify-full (or require) to the URL, "
                "or drop them"
            )
        if self.mode.startswith("verify") and self.rootcert is None:
            raise ConfigurationError(
                f"sslmode={self.mode} needs sslrootcert=FILE, the CA that signed the server's certificate "
                "(or sslrootcert=system for the system's CA store)"
            )
        if self.rootcert == SYSTEM and self.mode != "verify-full":
            raise ConfigurationError(
                "sslrootcert=system trusts every public CA: use it with sslmode=verify-full"
            )
        if (self.cert is None) != (self.key is None):
            raise ConfigurationError(
                "sslcert and sslkey go together: give the client certificate and its key"
            )
        if self.negotiation not in ("postgres", "direct"):
            raise ConfigurationError(f"sslnegotiation={self.negotiation!r} is not postgres or direct")
        if self.negotiation == "direct" and self.mode == "disable":
            raise ConfigurationError("sslnegotiation=direct needs sslmode=require, verify-ca or verify-full")

    def _files(self) -> dict[str, str | None]:
        return {
            "sslrootcert": self.rootcert,
            "sslcert": self.cert,
            "sslkey": self.key,
            "sslpassword": self.password,
            "sslcrl": self.crl,
        }

    @property
    def enabled(self) -> bool:
        return self.mode != "disable"

    def context(self) -> ssl.SSLContext | None:
        """A fresh context (files read now), or None for plaintext."""
        if not self.enabled:
            return None
        verify = self.mode != "require" or self.rootcert is not None  # libpq: require + a CA is verify-ca
        return client_context(
            ca=None if self.rootcert == SYSTEM else self.rootcert,
            cert=self.cert,
            key=self.key,
            password=self.password,
            verify=verify,
            check_hostname=self.mode == "verify-full",
            crl=self.crl,
            minimum=tls_version(self.min_version or "TLSv1.2", setting="ssl_min_protocol_version"),
            maximum=None
            if self.max_version is None
            else tls_version(self.max_version, setting="ssl_max_protocol_version"),
        )

    def connect_args(self) -> dict[str, Any]:
        """asyncpg's `connect()` arguments: always an explicit `ssl`, so asyncpg's own default
        (`prefer`, or `PGSSLMODE`) never applies."""
        args: dict[str, Any] = {"ssl": self.context() or False}
        if self.negotiation == "direct":
            args["direct_tls"] = True
        return args

    def do_connect(self, dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        """SQLAlchemy's `do_connect` event: connect as this says, with the files as they are now.

        `event.listen(engine.sync_engine, "do_connect", tls.do_connect)`. A TLS
        failure becomes a `TLSError` (a `ConnectionError`) naming the server and
        the reason; nothing is retried in plaintext.
        """
        cparams.update(self.connect_args())
        try:
            return dialect.connect(*cargs, **cparams)
        except (ssl.SSLError, ConnectionError) as exc:
            # asyncpg raises a bare ConnectionError only while negotiating TLS (the server said no to
            # it, or hung up); a server that is down is a subclass (refused, reset), not a TLS failure
            if not isinstance(exc, ssl.SSLError) and not (self.enabled and type(exc) is ConnectionError):
                raise
            where = f"{cparams.get('host')}:{cparams.get('port')}"
            reason = explain(exc, ca="sslrootcert", client="sslcert and sslkey") or (
                f"the server did not take up TLS ({exc})"
            )
            raise TLSError(f"TLS to PostgreSQL at {where} failed: {reason}", server=where) from exc

    def describe(self) -> str:
        """One line for logs: the mode and the files, never the password."""
        if not self.enabled:
            return "plaintext (sslmode=disable)"
        shown = {k: v for k, v in self._files().items() if v is not None and k != "sslpassword"}
        files = ", ".join(f"{k}={v}" for k, v in shown.items())
        return f"TLS sslmode={self.mode}" + (f" ({files})" if files else "")


def split_tls(url: str) -> tuple[str, PostgresTLS]:
    """`url` without its TLS parameters, and those parameters checked (files read once, to fail now)."""
    parts = urlsplit(url)
    kept: list[tuple[str, str]] = []
    found: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        target = PARAMETERS.get(name)
        if target is None:
            if name.startswith("ssl"):
                raise ConfigurationError(
                    f"{name!r} is not a TLS parameter fencegate knows: use {', '.join(PARAMETERS)}"
                )
            kept.append((name, value))
        elif target in found:
            raise ConfigurationError(f"the URL sets {name} twice (sslmode and ssl are one setting)")
        else:
            found[target] = value
    tls = PostgresTLS(**found)
    tls.context()
    return urlunsplit(parts._replace(query=urlencode(kept))), tls
