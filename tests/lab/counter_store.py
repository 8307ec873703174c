"""A tiny counter store on redis: a unit-level double of the gateway for the runner's own tests.

The scenarios run on the real gateway (`lab.gateway_store`); this store lets
`tests/lab/test_runner.py` exercise the runner's process handling on real
processes without starting a gateway per test.

The store records the acceptance order (a `seq` bumped in the same Lua script
as the read or write) and, when `fenced`, refuses a token below the highest
it has seen, like the gateway's fence: check and op in one script.
"""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from fencegate.lab.errors import StoreError
from fencegate.lab.protocols import LeaseInfo, StoreReply

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
