"""A tiny counter store and token-drawing locks on redis, for the lab's tests only.

The lab's real stores come with the gateway; these exist so the runner and
the scenarios can be exercised end to end on real processes and real redis.
The store records the acceptance order (a `seq` bumped in the same Lua script
as the read or write) and, when `fenced`, refuses a token below the highest
it has seen, like the gateway's fence: check and op in one script.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from lab.errors import StoreError
from lab.locks import SingleLock
from lab.protocols import LeaseInfo, StoreReply
from lockclient.errors import TokenSourceError

# KEYS[1] counter / KEYS[2] seq / KEYS[3] mark / ARGV[1] token or -1 (unfenced) / ARGV[2] "read" or new value
# returns {value or -1, seq}, seq 0 when refused
OP = """
local token = tonumber(ARGV[1])
if token >= 0 then
    local mark = tonumber(redis.call("GET", KEYS[3]) or "0")
    if token < mark then
        return {-1, 0}
    end
    redis.call("SET", KEYS[3], token)
end
if ARGV[2] ~= "read" then
    redis.call("SET", KEYS[1], ARGV[2])
end
return {tonumber(redis.call("GET", KEYS[1]) or "0"), redis.call("INCR", KEYS[2])}
"""


class RedisCounter:
    def __init__(self, url: str, key: str, fenced: bool = False) -> None:
        self._redis = aioredis.Redis.from_url(url)
        self._keys = [key, f"{key}:seq", f"{key}:mark"]
        self._op = self._redis.register_script(OP)
        self._fenced = fenced

    async def read(self, lease: LeaseInfo) -> StoreReply:
        return await self._call(lease, "read")

    async def write(self, value: int, lease: LeaseInfo) -> StoreReply:
        return await self._call(lease, str(value))

    async def final(self) -> int:
        return int(await self._redis.get(self._keys[0]) or 0)

    async def aclose(self) -> None:
        await self._redis.aclose()

    async def _call(self, lease: LeaseInfo, what: str) -> StoreReply:
        token = lease.token if self._fenced and lease.token is not None else -1
        try:
            value, seq = await self._op(keys=self._keys, args=[token, what])
        except RedisError as exc:
            raise StoreError(f"counter store failed: {exc}") from exc
        if seq == 0:
            return StoreReply("refused", detail="stale token")
        return StoreReply("ok", value=int(value), seq=int(seq))


class _Tokens:
    def __init__(self, url: str, key: str) -> None:
        self._redis = aioredis.Redis.from_url(url)
        self._key = key

    async def next(self) -> int:
        try:
            return int(await self._redis.incr(self._key))
        except RedisError as exc:
            raise TokenSourceError(f"redis INCR failed: {exc}", source="redis-incr") from exc

    async def aclose(self) -> None:
        await self._redis.aclose()


class TokenSingleLock:
    """SingleLock plus a token drawn before each attempt (as DESIGN.md's flow step 1)."""

    def __init__(self, url: str, tokens: str, key: str) -> None:
        self._lock = SingleLock(url)
        self._tokens = _Tokens(tokens, key)

    async def acquire(self, resource: str, ttl: float) -> LeaseInfo:
        token = await self._tokens.next()
        lease = await self._lock.acquire(resource, ttl)
        return LeaseInfo(resource=lease.resource, owner=lease.owner, token=token, until=lease.until)

    async def release(self, lease: LeaseInfo) -> bool:
        return await self._lock.release(lease)

    async def aclose(self) -> None:
        await self._lock.aclose()
        await self._tokens.aclose()


class TokenOnly:
    """fence-only mode: a token, no lock, no validity."""

    def __init__(self, tokens: str, key: str, **_: Any) -> None:
        self._tokens = _Tokens(tokens, key)

    async def acquire(self, resource: str, ttl: float) -> LeaseInfo:
        token = await self._tokens.next()
        return LeaseInfo(resource=resource, owner=f"token-{token}", token=token)

    async def release(self, lease: LeaseInfo) -> bool:
        return True

    async def aclose(self) -> None:
        await self._tokens.aclose()
