"""Monotonic sources of fencing tokens, and `open_token_source(url)` to pick one by URL.

| URL | source | safe because |
|---|---|---|
| `sqlite:///relative.db`, `sqlite:////abs/path.db` | `SQLiteTokens` | one file, one machine, fsynced |
| `postgresql://user@host:port/db[?sslmode=...]` | `PostgresTokens` | a `CACHE 1` sequence on one primary |
| `zookeeper://host:port[,host:port...][/chroot][?use_ssl=...]` | `ZooKeeperTokens` | zxids are ordered |
| `etcd://host:port[,host:port...][?use_ssl=...]` | `EtcdTokens` | revisions are ordered by Raft |
| `redis://host:port?unsafe=1` | `RedisIncrTokens` | it is NOT: lab only |

Each source's module, and its driver, is imported on first use (`open_token_source`
or the class name): a program that never draws from ZooKeeper never loads kazoo.
A driver that is not installed is a `MissingExtra` naming the extra to install
(`pip install 'fencegate[zookeeper]'`, `[postgresql]`, `[etcd]`).

TLS: PostgreSQL URLs take libpq's `sslmode`, `sslrootcert`, `sslcert`, `sslkey`
(`lockclient.postgres_tls`); ZooKeeper URLs take kazoo's `use_ssl`, `ca`,
`certfile`, `keyfile`, `verify_certs`, `check_hostname` (`ZooKeeperTokens`);
etcd URLs take `use_ssl`, `ca`, `certfile`, `keyfile` (`EtcdTokens`: the
members' certificates are always verified, there is no switch to skip it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from lockclient.errors import ConfigurationError
from lockclient.protocols import TokenSource

if TYPE_CHECKING:
    from lockclient.tokens.etcd import EtcdTokens
    from lockclient.tokens.postgres import PostgresTokens
    from lockclient.tokens.redis_incr import RedisIncrTokens
    from lockclient.tokens.sqlite import SQLiteTokens
    from lockclient.tokens.zookeeper import ZooKeeperTokens

__all__ = [
    "EtcdTokens",
    "PostgresTokens",
    "RedisIncrTokens",
    "SQLiteTokens",
    "ZooKeeperTokens",
    "open_token_source",
]

# each source's class and the module that defines it, imported (with its driver) on first use
SOURCES = {
    "EtcdTokens": "lockclient.tokens.etcd",
    "PostgresTokens": "lockclient.tokens.postgres",
    "RedisIncrTokens": "lockclient.tokens.redis_incr",
    "SQLiteTokens": "lockclient.tokens.sqlite",
    "ZooKeeperTokens": "lockclient.tokens.zookeeper",
}

SUPPORTED = (
    "sqlite:///path/to/file.db, postgresql://user@host:port/db, "
    "zookeeper://host:port[,host:port][/chroot], etcd://host:port[,host:port][?use_ssl=true&ca=...], "
    "redis://host:port?unsafe=1 (unsafe, lab only)"
)


def __getattr__(name: str) -> type:
    module = SOURCES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    source: type = getattr(importlib.import_module(module), name)
    return source


def _sqlite_path(url: str) -> str:
    # SQLAlchemy's convention: three slashes and a relative path, four for an absolute one
    path = unquote(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else ""
    if not path or path == ":memory:":
        raise ConfigurationError(
            f"{url!r} names no file: use sqlite:///relative.db or sqlite:////absolute/path.db "
            "(an in-memory database cannot be shared by processes)"
        )
    return path


def open_token_source(url: str, *, allow_unsafe: bool = False) -> TokenSource:
    """The token source a URL names; nothing connects until the first token is asked for.

    The Redis INCR source is refused unless the URL says `?unsafe=1` or
    `allow_unsafe=True`: it can go back after a restart, see `RedisIncrTokens`.
    """
    try:
        scheme = urlsplit(url).scheme
    except ValueError as exc:  # e.g. an unclosed [IPv6 address]: not a URL at all
        raise ConfigurationError(
            f"token source URL cannot be parsed ({exc}): use one of {SUPPORTED}"
        ) from exc
    if scheme == "sqlite":
        from lockclient.tokens.sqlite import SQLiteTokens

        return SQLiteTokens(_sqlite_path(url))
    if scheme in ("postgresql", "postgres", "postgresql+asyncpg"):
        from lockclient.tokens.postgres import PostgresTokens

        return PostgresTokens(url)
    if scheme == "zookeeper":
        from lockclient.tokens.zookeeper import ZooKeeperTokens, url_options

        parts = urlsplit(url)
        return ZooKeeperTokens(parts.netloc, chroot=parts.path.rstrip("/"), **url_options(parts.query))
    if scheme == "etcd":
        from lockclient.tokens.etcd import EtcdTokens
        from lockclient.tokens.etcd import url_options as etcd_options

        parts = urlsplit(url)  # a path is not an endpoint: parse_endpoints refuses it
        return EtcdTokens(parts.netloc + parts.path, **etcd_options(parts.query))
    if scheme in ("redis", "rediss"):
        from lockclient.tokens.redis_incr import RedisIncrTokens

        return RedisIncrTokens(url, unsafe=allow_unsafe)
    from lockclient.transport.endpoint import redact  # on this error only: it loads the Redis codec

    raise ConfigurationError(f"unknown token source URL {redact(url)!r}: use one of {SUPPORTED}")
