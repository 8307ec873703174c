"""A cancellation as a block ends (a timeout firing, a task cancelled) on real masters.

The keys are released all the same, and the caller's cancellation reaches
the caller: a release never swallows it. Each test queues the cancel for the
loop's next iteration from inside the block, so it lands while the release
has just started, every run.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from lockclient import Redlock, SQLiteTokens
from tests.lockclient.conftest import eventually, values


def _cancel_soon() -> None:
    """Cancel the running task at the loop's next iteration: as the block it is called in ends."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().call_soon(task.cancel)


async def _nowhere(raw: list[Redis], *keys: str) -> None:
    async def gone() -> bool:
        found = [await values(raw, key) for key in keys]
        return found == [[None] * len(raw)] * len(keys)

    await eventually(gone, what=f"{keys} deleted on every master")


async def _cancelled(body: Callable[[], Coroutine[Any, Any, None]]) -> BaseException | None:
    """Run `body` as a task of its own; what it ended with (None if it returned)."""
    task = asyncio.create_task(body())
    await asyncio.wait([task])
    return task.exception() if not task.cancelled() else asyncio.CancelledError()


@pytest.mark.parametrize("auto_extend", [False, True])
async def test_a_cancel_as_a_lock_block_ends_releases_and_reaches_the_caller(
    urls: list[str], raw: list[Redis], tmp_path: Path, auto_extend: bool
) -> None:
    resource = f"cancel-{uuid.uuid4().hex[:10]}"
    after: list[str] = []
    async with Redlock(urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker:

        async def body() -> None:
            async with locker.lock(resource, ttl=30.0, auto_extend=auto_extend):
                _cancel_soon()
            after.append("ran past the cancellation")
            await asyncio.sleep(0)

        assert isinstance(await _cancelled(body), asyncio.CancelledError)
        assert after == []
        await _nowhere(raw, locker.key(resource))


@pytest.mark.parametrize("auto_extend", [False, True])
async def test_a_timeout_as_a_lock_block_ends_is_raised(
    urls: list[str], tmp_path: Path, auto_extend: bool
) -> None:
    """`asyncio.timeout` whose deadline passes as the block ends still raises TimeoutError, and the
    work after the block does not run."""
    resource = f"cancel-{uuid.uuid4().hex[:10]}"
    after: list[str] = []
    async with Redlock(urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker:

        async def body() -> None:
            async with asyncio.timeout(30) as scope:
                async with locker.lock(resource, ttl=30.0, auto_extend=auto_extend):
                    scope.reschedule(asyncio.get_running_loop().time())
                after.append("work past the deadline, which the timeout must cut short")

        with pytest.raises(TimeoutError):
            await body()
    assert after == []


@pytest.mark.parametrize("how", ["lock_many", "release_many"])
@pytest.mark.parametrize("auto_extend", [False, True])
async def test_a_cancel_as_a_group_is_released_releases_every_lease(
    urls: list[str], raw: list[Redis], tmp_path: Path, how: str, auto_extend: bool
) -> None:
    stem = uuid.uuid4().hex[:10]
    names = [f"cancel-{stem}-a", f"cancel-{stem}-b"]
    async with Redlock(urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker:

        async def body() -> None:
            if how == "lock_many":
                async with locker.lock_many(names, ttl=30.0, auto_extend=auto_extend):
                    _cancel_soon()
            else:
                multi = await locker.acquire_many(names, ttl=30.0, auto_extend=auto_extend)
                _cancel_soon()
                await locker.release_many(multi)

        assert isinstance(await _cancelled(body), asyncio.CancelledError)
        await _nowhere(raw, *(locker.key(name) for name in names))
