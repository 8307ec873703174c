"""Monotonic sources of fencing tokens, and `open_token_source(url)` to pick one by URL.

| URL | source | safe because |
|---|---|---|
| `sqlite:///relative.db`, `sqlite:////abs/path.db` | `SQLiteTokens` | one file, one machine, fsynced |
| `postgresql://user@host:port/db` | `PostgresTokens` | a `CACHE 1` sequence on one primary |
| `zookeeper://host:port[,host:port...][/chroot]` | `ZooKeeperTokens` | zxids are totally ordered |
| `redis://host:port?unsafe=1` | `RedisIncrTokens` | it is NOT: lab only |
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from lockclient.errors import ConfigurationError
from lockclient.protocols import TokenSource
from lockclient.tokens.postgres import PostgresTokens
from lockclient.tokens.redis_incr import RedisIncrTokens
from lockclient.tokens.sqlite import SQLiteTokens
from lockclient.tokens.zookeeper import ZooKeeperTokens

__all__ = [
    "PostgresTokens",
    "RedisIncrTokens",
    "SQLiteTokens",
    "ZooKeeperTokens",
    "open_token_source",
]

SUPPORTED = (
    "sqlite:///path/to/file.db, postgresql://user@host:port/db, "
    "zookeeper://host:port[,host:port][/chroot], redis://host:port?unsafe=1 (unsafe, lab only)"
)


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
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        return SQLiteTokens(_sqlite_path(url))
    if scheme in ("postgresql", "postgres", "postgresql+asyncpg"):
        return PostgresTokens(url)
    if scheme == "zookeeper":
        hosts, slash, chroot = url[len("zookeeper://") :].partition("/")
        return ZooKeeperTokens(hosts, chroot=(slash + chroot).rstrip("/"))
    if scheme in ("redis", "rediss"):
        return RedisIncrTokens(url, unsafe=allow_unsafe)
    raise ConfigurationError(f"unknown token source URL {url!r}: use one of {SUPPORTED}")
