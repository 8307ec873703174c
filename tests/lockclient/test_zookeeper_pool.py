"""A ZooKeeper outage holds only the token source's own threads.

Token calls block in kazoo's retries until their deadline while ZooKeeper
hangs; if they ran on the loop's default executor, every other `to_thread`
call in the process (a key-file reload, a fault injector) would queue behind
them. They run on the source's own pool, so the default executor stays free.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import TokenSourceError, ZooKeeperTokens

BLOCKED_CALLS = 12  # more than the default executor's workers on a 2-core machine (min(32, cpus + 4))


async def test_a_hung_zookeeper_does_not_starve_the_default_executor(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    cluster = cluster_factory(ClusterSpec(redis=0, zookeeper=True))
    resource = f"pool-{uuid.uuid4().hex[:8]}"
    async with ZooKeeperTokens(cluster.zookeeper, timeout=6.0) as tokens:
        first = await tokens.next_token(resource)
        cluster.pause("zookeeper-0")
        try:
            blocked = [asyncio.create_task(tokens.next_token(resource)) for _ in range(BLOCKED_CALLS)]
            await asyncio.sleep(0)  # let every call reach its worker thread
            # well inside the blocked calls' 6 s deadline, the default executor still serves
            assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), timeout=3.0) == "free"
        finally:
            cluster.resume("zookeeper-0")
        results = await asyncio.gather(*blocked, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            assert isinstance(result, TokenSourceError), result
        else:
            assert result > first


async def test_the_source_reopens_after_aclose(zookeeper_cluster: LocalCluster) -> None:
    tokens = ZooKeeperTokens(zookeeper_cluster.zookeeper)
    resource = f"reopen-{uuid.uuid4().hex[:8]}"
    first = await tokens.next_token(resource)
    await tokens.aclose()
    assert await tokens.next_token(resource) > first
    await tokens.aclose()
