"""UNSAFE: fencing tokens from `INCR` on a single Redis node. For the lab only.

This source exists to show, in the lab's `token-regress` scenario, why tokens
need a consensus-backed source. It is not safe: a Redis restart without
persistence (or with `appendfsync everysec` losing its last second), or a
failover to an asynchronous replica, resets or rewinds the counter, and the
fence then refuses every honest client or, worse, accepts a stale one. It
refuses to start unless the caller says `unsafe=True` (`?unsafe=1` in a URL),
and logs a warning every time it is built.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.exceptions import RedisError

from lockclient.errors import ConfigurationError
from lockclient.tokens._base import ClosingSource, check_resource, check_seconds, map_errors
from lockclient.transport.endpoint import redact

__all__ = ["RedisIncrTokens"]

log = logging.getLogger(__name__)

DEFAULT_KEY_PREFIX = "fencegate:tokens:"
DEFAULT_TIMEOUT = 5.0  # seconds for one token or one read, connecting included; then TokenSourceError
UNSAFE_FLAGS = {"unsafe"}
FIX = "check that the Redis node is reachable (and remember this source is unsafe)"
REFUSAL = (
    "RedisIncrTokens is UNSAFE: a Redis restart without persistence or a failover resets the INCR "
    "counter and tokens go back. Use SQLite, PostgreSQL or ZooKeeper tokens; to run it anyway "
    "(the lab's token-regress scenario), pass unsafe=True or add ?unsafe=1 to the URL"
)


def strip_unsafe_flag(url: str) -> tuple[str, bool]:
    """`redis://h:p?unsafe=1` -> (`redis://h:p`, True): the flag is ours, not redis-py's."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    unsafe = any(k in UNSAFE_FLAGS and v.lower() in ("1", "true", "yes") for k, v in query)
    rest = [(k, v) for k, v in query if k not in UNSAFE_FLAGS]
    return urlunsplit(parts._replace(query=urlencode(rest))), unsafe


class RedisIncrTokens(ClosingSource):
    """UNSAFE per-resource `INCR` counters on one Redis node; see the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        unsafe: bool = False,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        """`timeout` bounds each call: redis-py's sockets wait without end on a node that never answers."""
        check_seconds(timeout=timeout)
        url, flagged = strip_unsafe_flag(url)
        if not (unsafe or flagged):
            raise ConfigurationError(REFUSAL)
        if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ConfigurationError(f"{redact(url)!r} is not a Redis URL: use redis://host:port?unsafe=1")
        try:
            self._client: Redis = Redis.from_url(url)
        except ValueError as exc:  # redis-py's reading of a port that is no number, or out of range
            raise ConfigurationError(
                f"{redact(url)!r} is not a Redis URL ({exc}): use redis://host:port?unsafe=1 with a port "
                "from 1 to 65535"
            ) from None
        log.warning(
            "UNSAFE token source in use: Redis INCR at %s can go back after a restart or failover",
            redact(url),
        )
        self.url = url
        self.key_prefix = key_prefix
        self.timeout = timeout

    async def _within(self, doing: str, call: Awaitable[Any]) -> Any:
        with map_errors("redis-incr", f"{doing} within {self.timeout:g} s", RedisError, OSError, fix=FIX):
            async with asyncio.timeout(self.timeout):
                return await call

    async def next_token(self, resource: str) -> int:
        key = self.key_prefix + check_resource(resource)
        return int(await self._within("issue a token", self._client.incr(key)))

    async def upper_bound(self, resource: str) -> int:
        key = self.key_prefix + check_resource(resource)
        value = await self._within("read the highest token", self._client.get(key))
        return 0 if value is None else int(value)

    async def aclose(self) -> None:
        await self._client.aclose()

    def __repr__(self) -> str:
        return f"RedisIncrTokens({redact(self.url)!r}, unsafe=True)"
