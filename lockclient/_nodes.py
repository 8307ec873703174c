"""One Redis master as Redlock uses it: one pipelined connection and three commands.

Each master keeps one connection (`lockclient._resp`), reused by every attempt
and every concurrent caller. There is no client-side retry: a retry would hide
a slow node inside the per-node timeout that `fan_out` enforces, and Redlock
already retries whole attempts with a fresh value. A command abandoned at that
timeout drops its connection; the next command opens a new one.

Every command returns a future, not a coroutine: `fan_out` then waits on the
masters' replies directly, with no task per node.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

from lockclient._resp import Connection, Endpoint, Link, Push, Reply, Script, open_link, pack
from lockclient._scripts import EXTEND, RELEASE
from lockclient.errors import ConfigurationError

__all__ = ["Master", "release_channel"]

SCHEMES = ("redis", "rediss", "unix")
PING = pack("PING")
RELEASE_SCRIPT = Script(RELEASE)
EXTEND_SCRIPT = Script(EXTEND)


def release_channel(key: str) -> str:
    """The pub/sub channel the release script publishes on (channels and keys never collide)."""
    return f"{key}:released"


def check_url(url: str) -> str:
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise ConfigurationError(
            f"master {url!r} is not a Redis URL: use redis://host:port, rediss://host:port or unix:///path"
        )
    try:
        Endpoint.from_url(url)
    except ValueError as exc:
        raise ConfigurationError(
            f"master {url!r} is not a valid Redis URL ({exc}): check its port and /db"
        ) from exc
    return url


# One fan-out sends the same command to every master: encode it once for all of them.
@functools.lru_cache(maxsize=16)
def _set_nx(key: str, value: str, ttl_ms: int) -> bytes:
    return pack("SET", key, value, "NX", "PX", ttl_ms)


@functools.lru_cache(maxsize=16)
def _release(key: str, value: str) -> tuple[bytes, bytes]:
    channel = release_channel(key)
    return RELEASE_SCRIPT.evalsha(key, value, channel), RELEASE_SCRIPT.eval(key, value, channel)


@functools.lru_cache(maxsize=16)
def _extend(key: str, value: str, ttl_ms: int) -> tuple[bytes, bytes]:
    return EXTEND_SCRIPT.evalsha(key, value, ttl_ms), EXTEND_SCRIPT.eval(key, value, ttl_ms)


def _is_ok(reply: object) -> bool:
    return reply == b"OK"


def _is_pong(reply: object) -> bool:
    return reply == b"PONG"


def _is_one(reply: object) -> bool:
    return reply == 1


class Master:
    """A Redis master; `url` names it in per-node reasons."""

    def __init__(self, url: str, *, connect_timeout: float) -> None:
        self.url = check_url(url)
        self.endpoint = Endpoint.from_url(url)
        self.connection = Connection(self.endpoint, url, connect_timeout=connect_timeout)

    def ping(self) -> Reply[bool]:
        """Open the connection if it is not open, and check the master answers."""
        return self.connection.call(PING, _is_pong)

    def set_nx(self, key: str, value: str, ttl_ms: int) -> Reply[bool]:
        """`SET key value NX PX ttl`: True if this master granted the key."""
        return self.connection.call(_set_nx(key, value, ttl_ms), _is_ok)

    def release(self, key: str, value: str) -> Reply[bool]:
        """Compare-and-delete; True only if the key held `value` and is now gone."""
        evalsha, fallback = _release(key, value)
        return self.connection.call(evalsha, _is_one, fallback)

    def extend(self, key: str, value: str, ttl_ms: int) -> Reply[bool]:
        """Compare-and-pexpire; True only if the key held `value` and now lives `ttl_ms`."""
        evalsha, fallback = _extend(key, value, ttl_ms)
        return self.connection.call(evalsha, _is_one, fallback)

    async def subscriber(self, push: Push, *, timeout: float) -> Link:  # noqa: ASYNC109 - a handshake bound
        """A new connection of its own for pub/sub, every message passed to `push`."""
        link = await open_link(self.endpoint, self.url, timeout=timeout)
        link.push = push
        return link

    async def aclose(self) -> None:
        await self.connection.aclose()
