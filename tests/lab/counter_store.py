"""A tiny counter store on redis for the runner's tests only (the lab's stores come with the gateway).

It records the store's acceptance order (a `seq` counter bumped in the same
Lua script as the read or write) and checks no token: the redis-only mode.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from lab.errors import StoreError
from lab.protocols import LeaseInfo, StoreReply

# KEYS[1] counter / KEYS[2] acceptance seq / returns {value, seq}
READ = """
local value = tonumber(redis.call("GET", KEYS[1]) or "0")
return {value, redis.call("INCR", KEYS[2])}
"""
# KEYS[1] counter / KEYS[2] acceptance seq / ARGV[1] new value / returns seq
WRITE = """
redis.call("SET", KEYS[1], ARGV[1])
return redis.call("INCR", KEYS[2])
"""


class RedisCounter:
    def __init__(self, url: str, key: str) -> None:
        self._redis = aioredis.Redis.from_url(url)
        self._keys = [key, f"{key}:seq"]
        self._read = self._redis.register_script(READ)
        self._write = self._redis.register_script(WRITE)

    async def read(self, lease: LeaseInfo) -> StoreReply:
        value, seq = await self._call(self._read, [])
        return StoreReply("ok", value=int(value), seq=int(seq))

    async def write(self, value: int, lease: LeaseInfo) -> StoreReply:
        return StoreReply("ok", value=value, seq=int(await self._call(self._write, [value])))

    async def final(self) -> int:
        return int(await self._redis.get(self._keys[0]) or 0)

    async def aclose(self) -> None:
        await self._redis.aclose()

    async def _call(self, script: Any, args: list[int]) -> Any:
        try:
            return await script(keys=self._keys, args=args)
        except RedisError as exc:
            raise StoreError(f"counter store failed: {exc}") from exc
