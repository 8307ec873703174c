"""The two lab-only lock designs of the seed documents, so each has its row in the lab.

- `SingleLock`: the single-instance lock of the Redis docs' Redlock page:
  `SET key owner NX PX ttl`, released by a Lua compare-and-delete. Its
  validity is the TTL minus the time the SET took and a clock drift allowance.
- `SetnxGetsetLock`: the older pattern of the SETNX page: the value is the
  expiry as a Unix timestamp (wall clock, in each client), a client finding an
  expired value takes it over with GETSET and wins if the old value it got back
  was still expired; release is DEL if the value is still ours and unexpired.
  It relies on synchronised client clocks, which is part of what the lab shows.

Neither is safe under faults; Redlock lives in lockclient. Both make one
attempt per `acquire` and raise `LockNotAcquired`; the workload retries.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from fencegate.lab.errors import LabLockError
from fencegate.lab.protocols import LeaseInfo
from lockclient.errors import LockNotAcquired

# The Redlock page's drift allowance: 1% of the TTL plus 2 ms for the clock's granularity.
CLOCK_DRIFT_FACTOR = 0.01
CLOCK_DRIFT_FLOOR = 0.002
# A lab lock talks to a node on loopback; a call slower than this is a failed node.
SOCKET_TIMEOUT = 0.5

# KEYS[1] lock key / ARGV[1] owner value / returns 1 if released, 0 if the key is not ours
RELEASE_IF_OWNER = """
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
end
return 0
"""


def _client(url: str) -> aioredis.Redis:
    return aioredis.Redis.from_url(
        url, decode_responses=True, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
    )


def _drift(ttl: float) -> float:
    return ttl * CLOCK_DRIFT_FACTOR + CLOCK_DRIFT_FLOOR


def _expiry(value: bytes | str, resource: str) -> float:
    try:
        return float(value)
    except ValueError as exc:
        raise LockNotAcquired(
            f"{lock_key(resource)} holds {value!r}, not a SETNX/GETSET timestamp: another lock design owns "
            "this key; use a different resource name",
            resource=resource,
        ) from exc


def lock_key(resource: str) -> str:
    return f"fencegate:lab:lock:{resource}"


class SingleLock:
    """`SET NX PX` on one redis node; compare-and-delete release."""

    def __init__(self, url: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._redis = _client(url)
        self._release = self._redis.register_script(RELEASE_IF_OWNER)
        self._clock = clock

    async def acquire(self, resource: str, ttl: float) -> LeaseInfo:
        owner = secrets.token_hex(16)
        start = self._clock()
        try:
            taken = await self._redis.set(lock_key(resource), owner, nx=True, px=max(1, round(ttl * 1000)))
        except RedisError as exc:
            raise LockNotAcquired(
                f"redis node failed during SET NX: {exc}", resource=resource, reasons={"node": str(exc)}
            ) from exc
        until = start + ttl - _drift(ttl)
        if not taken:
            raise LockNotAcquired(f"{resource} is held by another owner", resource=resource)
        if self._clock() >= until:  # no validity left: give the key back, as the Redlock page says
            with contextlib.suppress(RedisError):
                await self._release(keys=[lock_key(resource)], args=[owner])
            raise LockNotAcquired(f"SET NX on {resource} took longer than its TTL", resource=resource)
        return LeaseInfo(resource=resource, owner=owner, until=until)

    async def release(self, lease: LeaseInfo) -> bool:
        try:
            released = await self._release(keys=[lock_key(lease.resource)], args=[lease.owner])
        except RedisError as exc:
            raise LabLockError(f"release of {lease.resource} failed: {exc}", resource=lease.resource) from exc
        return bool(released)

    async def aclose(self) -> None:
        await self._redis.aclose()


class SetnxGetsetLock:
    """The SETNX page's pattern: value = expiry timestamp, GETSET to take over an expired lock."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._redis = _client(url)
        self._clock = clock
        self._wall = wall

    async def acquire(self, resource: str, ttl: float) -> LeaseInfo:
        key = lock_key(resource)
        start, now = self._clock(), self._wall()
        # The page adds one second to the timeout; the lab's TTLs are sub-second, so it adds the TTL as is.
        owner = f"{now + ttl:.6f}"
        try:
            if await self._redis.setnx(key, owner):
                return LeaseInfo(resource=resource, owner=owner, until=start + ttl)
            current = await self._redis.get(key)
            if current is not None and _expiry(current, resource) > now:
                raise LockNotAcquired(f"{resource} is held until {float(current):.3f}", resource=resource)
            previous = await self._redis.getset(key, owner)
        except RedisError as exc:
            raise LockNotAcquired(f"redis node failed: {exc}", resource=resource) from exc
        if previous is not None and _expiry(previous, resource) > now:
            # Another client took it over first; we overwrote its timestamp by a hair, as the page allows.
            raise LockNotAcquired(f"{resource} was taken over by another client first", resource=resource)
        return LeaseInfo(resource=resource, owner=owner, until=start + ttl)

    async def release(self, lease: LeaseInfo) -> bool:
        """DEL only while the value is ours and unexpired (GET then DEL: the pattern is not atomic)."""
        key = lock_key(lease.resource)
        try:
            current = await self._redis.get(key)
            if current is None or current != lease.owner or float(lease.owner) <= self._wall():
                return False
            await self._redis.delete(key)
        except RedisError as exc:
            raise LabLockError(f"release of {lease.resource} failed: {exc}", resource=lease.resource) from exc
        return True

    async def aclose(self) -> None:
        await self._redis.aclose()


LOCKS: dict[str, Callable[[str], SingleLock | SetnxGetsetLock]] = {
    "single": SingleLock,
    "setnx-getset": SetnxGetsetLock,
}

__all__ = ["LOCKS", "RELEASE_IF_OWNER", "SetnxGetsetLock", "SingleLock", "lock_key"]
