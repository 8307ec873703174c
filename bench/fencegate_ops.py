"""fencegate's side of the lease benchmarks, as `Op`s."""

from __future__ import annotations

from dataclasses import dataclass

from lockclient import Redlock
from lockclient.protocols import TokenSource

from bench.runner import Op

TTL_S = 10.0


@dataclass
class LeaseOp:
    """One uncontended acquire+release through fencegate's Redlock."""

    locker: Redlock
    key: str
    tokens: TokenSource | None

    async def __call__(self) -> None:
        lease = await self.locker.acquire(self.key, ttl=TTL_S, blocking=False)
        await self.locker.release(lease)

    async def aclose(self) -> None:
        await self.locker.aclose()
        if self.tokens is not None:
            await self.tokens.aclose()


async def fencegate_lease(urls: list[str], key: str, tokens: TokenSource | None = None) -> Op:
    return LeaseOp(Redlock(urls, tokens=tokens), key, tokens)
