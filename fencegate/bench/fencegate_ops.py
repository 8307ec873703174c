"""fencegate's side of the lease benchmarks, as `UnitOfWork`s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fencegate.bench.runner import UnitOfWork
from lockclient import Redlock
from lockclient.protocols import TokenSource

TTL_S = 10.0


@dataclass
class LeaseOp:
    """One uncontended acquire+release through fencegate's Redlock (which owns its token source)."""

    locker: Redlock[Any]
    key: str

    async def __call__(self) -> None:
        lease = await self.locker.acquire(self.key, ttl=TTL_S, timeout=5.0)
        await self.locker.release(lease)

    async def aclose(self) -> None:
        await self.locker.aclose()


async def fencegate_lease(urls: list[str], key: str, tokens: TokenSource | None = None) -> UnitOfWork:
    return LeaseOp(Redlock(urls, tokens=tokens), key)
