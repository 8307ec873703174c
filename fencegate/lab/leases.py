"""The lab's locks built on lockclient: Redlock (with or without tokens), and fence-only tokens.

- `RedlockLease`: one `Redlock.acquire(blocking=False)` per call, so the
  workload's retry loop and checkpoints stay in charge. With a token source the
  lease carries the token drawn before the attempt (DESIGN.md flow, step 1).
  Its validity end is the lease's deadline on the monotonic clock, which every
  process on the machine shares, so the checker can compare it.
- `Tokened`: the lab's own lock designs with a token drawn before each attempt.
- `TokenOnly`: fence-only mode. No lock at all: each "lease" is a fresh token
  that claims no validity; the gateway's fence is the only protection.

Token sources are named by URL (`lockclient.open_token_source`); the Redis
INCR source is allowed here because showing it fail is the point of
token-regress.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from fencegate.lab.locks import LOCKS
from fencegate.lab.protocols import LeaseInfo
from lockclient import Lease, LockLost, Redlock, open_token_source
from lockclient.protocols import TokenSource

# Each command to a lab node waits at most this long. The lab's nodes sit behind its own proxies on a
# loaded 2-core machine; a cut-off node costs this much per attempt, well inside every lab TTL.
NODE_TIMEOUT = 0.1


def _source(tokens: str | None) -> TokenSource | None:
    return None if tokens is None else open_token_source(tokens, allow_unsafe=True)


class RedlockLease:
    """Redlock over the lab's nodes; one attempt per `acquire`."""

    def __init__(self, urls: Sequence[str], *, tokens: str | None = None) -> None:
        self._redlock: Redlock[int | None] = Redlock(urls, tokens=_source(tokens), node_timeout=NODE_TIMEOUT)
        self._leases: dict[str, Lease[int | None]] = {}
        self._connected = False

    async def acquire(self, resource: str, ttl: float) -> LeaseInfo:
        if not self._connected:  # the handshakes, not charged to the first attempt's node timeout
            self._connected = True
            await self._redlock.connect()
        lease = await self._redlock.acquire(resource, ttl=ttl, blocking=False)
        self._leases[lease.value] = lease
        return LeaseInfo(resource=resource, owner=lease.value, token=lease.token, until=lease.deadline)

    async def release(self, lease: LeaseInfo) -> bool:
        held = self._leases.pop(lease.owner, None)
        if held is None:
            return False
        try:
            await self._redlock.release(held)
        except LockLost:
            return False
        return True

    async def aclose(self) -> None:
        await self._redlock.aclose()


class TokenOnly:
    """fence-only: a token per iteration, no lock, no validity."""

    def __init__(self, *, tokens: str) -> None:
        self._source = open_token_source(tokens, allow_unsafe=True)

    async def acquire(self, resource: str, ttl: float) -> LeaseInfo:
        token = await self._source.next_token(resource)
        return LeaseInfo(resource=resource, owner=f"token-{token}", token=token)

    async def release(self, lease: LeaseInfo) -> bool:
        return True

    async def aclose(self) -> None:
        await self._source.aclose()


class Tokened:
    """A lab lock design (`single`, `setnx-getset`) with a token drawn before each attempt."""

    def __init__(self, design: str, url: str, *, tokens: str) -> None:
        self._lock = LOCKS[design](url)
        self._source = open_token_source(tokens, allow_unsafe=True)

    async def acquire(self, resource: str, ttl: float) -> LeaseInfo:
        token = await self._source.next_token(resource)
        lease = await self._lock.acquire(resource, ttl)
        return replace(lease, token=token)

    async def release(self, lease: LeaseInfo) -> bool:
        return await self._lock.release(lease)

    async def aclose(self) -> None:
        await self._lock.aclose()
        await self._source.aclose()


def redlock(urls: Sequence[str], tokens: str | None = None) -> RedlockLease:
    """The factory a client process names (`lab.leases:redlock`)."""
    return RedlockLease(urls, tokens=tokens)


def token_only(tokens: str) -> TokenOnly:
    """The factory a client process names (`lab.leases:token_only`)."""
    return TokenOnly(tokens=tokens)


def tokened(design: str, url: str, tokens: str) -> Tokened:
    """The factory a client process names (`lab.leases:tokened`)."""
    return Tokened(design, url, tokens=tokens)


__all__ = ["NODE_TIMEOUT", "RedlockLease", "TokenOnly", "Tokened", "redlock", "token_only", "tokened"]
