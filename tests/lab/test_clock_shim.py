"""The clock shim shifts a real redis-server's wall clock mid-run, and redis expires keys by it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.errors import FaultError
from fencegate.lab.faults.clock import ClockShift, build_shim
from tests.waiting import eventually


def test_the_shim_is_built_once_and_cached(tmp_path: Path) -> None:
    first = build_shim(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert build_shim(tmp_path) == first
    assert first.stat().st_mtime_ns == mtime
    assert first.name.startswith("clockshim-")
    assert first.name.endswith(".so")


def test_a_nonsense_jump_is_refused_and_keeps_the_offset(tmp_path: Path) -> None:
    shift = ClockShift(tmp_path / "offset")
    shift.jump(5)
    with pytest.raises(FaultError, match="not a sane jump"):
        shift.jump(float("nan"))
    assert shift.offset == 5


async def test_a_forward_jump_mid_run_expires_a_key_at_once(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], tmp_path: Path
) -> None:
    cluster = cluster_factory(ClusterSpec(redis=0))
    shift = ClockShift(tmp_path / "offset")
    node = await asyncio.to_thread(cluster.add_redis, env=shift.env())
    async with aioredis.Redis.from_url(node.url) as client:
        seconds, _ = await client.time()
        assert abs(seconds - time.time()) < 5  # offset 0: the real clock
        await client.set("lease", "c1", ex=30)
        assert await client.exists("lease") == 1
        shift.jump(120)

        async def jumped() -> bool:
            seconds, _ = await client.time()
            return bool(seconds > time.time() + 110)

        await eventually(jumped)
        assert await client.exists("lease") == 0  # 30 s TTL, 120 s jump: gone
        await client.set("later", "c2", ex=30)
        shift.jump(60)  # back to +60: the new key (expires at +150) survives
        await eventually(lambda: _clock_near(client, 60))
        assert await client.exists("later") == 1


async def _clock_near(client: aioredis.Redis, offset: float) -> bool:
    seconds, _ = await client.time()
    return bool(abs(seconds - time.time() - offset) < 5)
