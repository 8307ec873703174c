"""One Redis master as Redlock uses it: a connection pool and three commands.

Each master gets its own pool, reused by every attempt. redis-py's own retry
is switched off: a retry would hide a slow node inside the per-node timeout
that `fan_out` enforces, and Redlock already retries whole attempts with a
fresh value. A command cancelled by that timeout drops its connection (redis-py
disconnects rather than reuse a socket with a reply in flight).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from lockclient._scripts import EXTEND, RELEASE
from lockclient.errors import ConfigurationError

__all__ = ["Master", "release_channel"]

SCHEMES = ("redis", "rediss", "unix")


def release_channel(key: str) -> str:
    """The pub/sub channel the release script publishes on (channels and keys never collide)."""
    return f"{key}:released"


def check_url(url: str) -> str:
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise ConfigurationError(
            f"master {url!r} is not a Redis URL: use redis://host:port, rediss://host:port or unix:///path"
        )
    return url


class Master:
    """A Redis master; `url` names it in per-node reasons."""

    def __init__(self, url: str, *, connect_timeout: float) -> None:
        self.url = check_url(url)
        self.client: Redis = Redis.from_url(
            url,
            socket_connect_timeout=connect_timeout,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
            protocol=2,  # RESP2 needs no HELLO: one round trip less to open a connection
        )
        self._release = self.client.register_script(RELEASE)
        self._extend = self.client.register_script(EXTEND)

    async def ping(self) -> bool:
        """Open a pooled connection if none is open, and check the master answers."""
        return bool(await self.client.ping())

    async def set_nx(self, key: str, value: str, ttl_ms: int) -> bool:
        """`SET key value NX PX ttl`: True if this master granted the key."""
        return bool(await self.client.set(key, value, nx=True, px=ttl_ms))

    async def release(self, key: str, value: str) -> bool:
        """Compare-and-delete; True only if the key held `value` and is now gone."""
        return bool(await self._release(keys=[key], args=[value, release_channel(key)]))

    async def extend(self, key: str, value: str, ttl_ms: int) -> bool:
        """Compare-and-pexpire; True only if the key held `value` and now lives `ttl_ms`."""
        return bool(await self._extend(keys=[key], args=[value, ttl_ms]))

    async def aclose(self) -> None:
        await self.client.aclose(close_connection_pool=True)
