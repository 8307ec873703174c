"""The yardstick: a minimal asyncio Redlock on redis.asyncio, as a reader would write it.

It does what the Redlock page says and nothing more (no tokens, no retries,
no validity bookkeeping beyond the check). fencegate's own Redlock is
measured against it to show what its extra care costs.
"""

from __future__ import annotations

import asyncio
import os
import time

import redis.asyncio as redis

RELEASE = """
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end
"""


class MinimalRedlock:
    """SET NX PX on every master at once; quorum and validity; release by script."""

    def __init__(self, urls: list[str]) -> None:
        self._masters = [redis.from_url(url) for url in urls]
        self._quorum = len(urls) // 2 + 1
        self._release = [m.register_script(RELEASE) for m in self._masters]

    async def acquire(self, key: str, ttl_ms: int) -> bytes | None:
        value = os.urandom(20)
        start = time.monotonic()
        replies = await asyncio.gather(
            *(m.set(key, value, nx=True, px=ttl_ms) for m in self._masters), return_exceptions=True
        )
        granted = sum(1 for r in replies if r is True)
        elapsed_ms = (time.monotonic() - start) * 1000
        if granted >= self._quorum and ttl_ms - elapsed_ms - (ttl_ms * 0.01 + 2) > 0:
            return value
        await self.release(key, value)
        return None

    async def release(self, key: str, value: bytes) -> None:
        await asyncio.gather(*(s(keys=[key], args=[value]) for s in self._release), return_exceptions=True)

    async def aclose(self) -> None:
        for master in self._masters:
            await master.aclose()
