"""The settings of a ZooKeeper token source, checked before kazoo sees them.

kazoo reads a bad host list, path or TLS setting late and differently (a bare
ValueError on its first connect, a login silently dropped, a certificate
ignored without `use_ssl`), so each one is refused here with a
`ConfigurationError` that says what to give instead. Nothing here imports
kazoo: `lockclient.tokens.zookeeper` stays the only module that does.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

from lockclient.errors import ConfigurationError
from lockclient.tls import client_context
from lockclient.tokens._base import query_options

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_ROOT",
    "DEFAULT_TIMEOUT",
    "FILES",
    "FLAGS",
    "check_hosts",
    "check_paths",
    "tls_context",
    "url_options",
    "znode_name",
]

DEFAULT_ROOT = "/fencegate/tokens"
DEFAULT_CONNECT_TIMEOUT = 3.0  # seconds for the first connection to the ensemble
DEFAULT_TIMEOUT = 10.0  # seconds for one token across reconnects; also the session timeout
MAX_SHOWN = 40  # characters of a bad host an error message repeats
# URL query parameters: kazoo's names for its TLS settings
FLAGS = ("use_ssl", "verify_certs", "check_hostname")
FILES = ("ca", "certfile", "keyfile", "keyfile_password")


def znode_name(resource: str) -> str:
    """Any resource name as one znode name ('/' and '%' escaped; '.' and '..' are reserved)."""
    name = quote(resource, safe="")
    return name.replace(".", "%2E") if name in (".", "..") else name


def url_options(query: str) -> dict[str, Any]:
    """The TLS keywords of `ZooKeeperTokens` from a `zookeeper://` URL's query."""
    return query_options(query, scheme="zookeeper", flags=FLAGS, files=FILES)


def check_hosts(hosts: str) -> None:
    """`hosts` as kazoo will read them, `host[:port][,host[:port]...]`, or a `ConfigurationError` saying
    which one is wrong: kazoo itself raises a bare ValueError on its first connect, or connects to a
    host it read differently (a login before `@` is dropped without a word)."""
    if "@" in hosts:  # never shown: it may hold a password
        raise ConfigurationError(
            "ZooKeeper hosts take no user or password: drop 'user:password@', give 'host:port[,host:port...]'"
        )
    if not hosts:
        raise ConfigurationError("no ZooKeeper hosts given: give 'host:port[,host:port...]', e.g. zk1:2181")
    if "/" in hosts:
        raise ConfigurationError(
            f"hosts must be 'host:port[,host:port...]' without a path, got {hosts!r}: pass chroot="
        )
    for host_port in hosts.split(","):
        shown = host_port[:MAX_SHOWN]
        try:
            parts = urlsplit("zookeeper://" + host_port)  # as kazoo's collect_hosts reads it
            port = parts.port
        except ValueError as exc:  # a port that is no number or out of range, an unclosed [IPv6
            raise ConfigurationError(
                f"ZooKeeper host {shown!r} is not host[:port] ({exc}): give a port from 1 to 65535, "
                "and an IPv6 address in brackets ([::1]:2181)"
            ) from None
        if not parts.hostname or not parts.hostname.strip() or port == 0:
            raise ConfigurationError(
                f"ZooKeeper host {shown!r} is not host[:port]: give e.g. zk1:2181 (a port from 1 to 65535; "
                "hosts comma-separated, none empty)"
            )


def check_paths(chroot: str, root: str) -> None:
    """The chroot and the tokens' root are absolute znode paths, or a `ConfigurationError`."""
    if chroot and not chroot.startswith("/"):
        raise ConfigurationError(f"chroot must start with '/', got {chroot!r}")
    if not root.startswith("/") or root.endswith("/"):
        raise ConfigurationError(f"root must be an absolute znode path like /fencegate/tokens, got {root!r}")


def tls_context(
    use_ssl: bool,
    *,
    ca: str | None,
    certfile: str | None,
    keyfile: str | None,
    keyfile_password: str | None,
    verify_certs: bool,
    check_hostname: bool,
) -> Callable[[], ssl.SSLContext] | None:
    """What makes the client's TLS context for each connection (None without `use_ssl`), made once
    here so a file that is unreadable or does not fit is named now, not on the first draw."""
    if not use_ssl:
        given = [n for n, v in zip(FILES, (ca, certfile, keyfile, keyfile_password), strict=True) if v]
        if given:
            raise ConfigurationError(
                f"{', '.join(given)} given but use_ssl is off: add use_ssl=true, or drop them"
            )
        return None
    context = functools.partial(
        client_context, ca=ca, cert=certfile, key=keyfile, password=keyfile_password,
        verify=verify_certs, check_hostname=check_hostname,
    )  # fmt: skip
    if (certfile is None) != (keyfile is None):
        raise ConfigurationError("certfile and keyfile go together: give the certificate and its key")
    context()  # the files are readable and fit, or the error says which one is not
    return context
