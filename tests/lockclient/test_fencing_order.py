"""Why the token is drawn before the quorum: whoever stalls holds the older token.

The gateway half of the argument (that the older token is the one refused)
is tested with the gateway; here we show the ordering it relies on.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis

from lockclient import LockLost, Redlock, SQLiteTokens
from tests.lockclient.conftest import StepClock, eventually, values


class StallAfterDraw:
    """A real SQLite source whose holder freezes right after drawing, until released (a GC pause)."""

    def __init__(self, source: SQLiteTokens) -> None:
        self.source = source
        self.drawn = asyncio.Event()
        self.resume = asyncio.Event()

    async def next_token(self, resource: str) -> int:
        token = await self.source.next_token(resource)
        self.drawn.set()
        await self.resume.wait()
        return token

    async def upper_bound(self, resource: str) -> int:
        return await self.source.upper_bound(resource)

    async def aclose(self) -> None:
        await self.source.aclose()


async def test_a_holder_stalled_between_draw_and_quorum_carries_the_older_token(
    urls: list[str], resource: str, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.db"
    stalling = StallAfterDraw(SQLiteTokens(path))
    async with Redlock(urls, tokens=stalling) as slow, Redlock(urls, tokens=SQLiteTokens(path)) as fast:
        slow_attempt = asyncio.create_task(slow.acquire(resource, ttl=5.0, blocking=False))
        await stalling.drawn.wait()
        async with fast.lock(resource, ttl=5.0) as current:
            pass  # the current holder takes the lock, writes with its token, releases
        stalling.resume.set()
        stale = await slow_attempt  # the stalled client wakes and gets the (now free) lock
        assert stale.token < current.token  # the fence will refuse it once `current` has written
        await slow.release(stale)


async def test_a_holder_stalled_past_its_ttl_has_a_lower_token_than_the_next_one(
    urls: list[str], resource: str, tmp_path: Path
) -> None:
    raw = [Redis.from_url(url) for url in urls]
    path = tmp_path / "tokens.db"
    try:
        # the paused holder's clock stands still: it believes its lease is valid throughout
        async with (
            Redlock(urls, tokens=SQLiteTokens(path), clock=StepClock(0.0)) as paused,
            Redlock(urls, tokens=SQLiteTokens(path)) as other,
        ):
            old = await paused.acquire(resource, ttl=0.3)

            async def expired() -> bool:
                return not any(await values(raw, paused.key(resource)))

            await eventually(expired)
            new = await other.acquire(resource, ttl=5.0, timeout=5.0)
            assert old.token < new.token
            old.check()  # from the inside, a paused holder cannot tell: only the fence can
            with pytest.raises(LockLost):  # its keys are gone; the release removes none of the new holder's
                await paused.release(old)
            assert await values(raw, other.key(resource)) == [new.value.encode()] * 5
            await other.release(new)
    finally:
        for client in raw:
            await client.aclose()
