"""Invariant 6 under the race that only PostgreSQL can have: a key bound while another request is under way.

On PostgreSQL each statement of a transaction sees what committed before it
started (READ COMMITTED), so a request that read "no binding" for its key can
meet, a few statements later, the object another replica just created under
another resource. Each test makes that interleaving happen on purpose: a
second connection holds the row lock of resource `b`'s mark, so a request
naming `b` stops at its fence upsert right after it read the binding; then a
write under `a` creates the key and commits; then the lock is let go. The
request under `b` must then be refused as `resource_mismatch` and change
nothing (not the object, not `b`'s mark), whatever its method.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import asyncpg
import pytest

from fencegate.lab.cluster import LocalCluster
from storage import BoundElsewhere, SqlObjectStore
from tests.databases import migrated_store
from tests.waiting import eventually

Names = Callable[[str], str]


@pytest.fixture
async def pg_store(postgres_cluster: LocalCluster) -> AsyncIterator[SqlObjectStore]:
    async with migrated_store(postgres_cluster.postgres_dsn) as store:
        yield store


@pytest.fixture
async def holder(postgres_cluster: LocalCluster) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(postgres_cluster.postgres_dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def _blocked_by(holder: asyncpg.Connection) -> bool:
    waiting = await holder.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
        holder.get_server_pid(),
    )
    return bool(waiting)


@pytest.mark.parametrize("method", ["PUT", "GET", "DELETE"])
async def test_a_request_that_read_no_binding_is_refused_when_the_key_was_bound_meanwhile(
    pg_store: SqlObjectStore, holder: asyncpg.Connection, names: Names, method: str
) -> None:
    key, a, b = names("doc"), names("a"), names("b")
    await pg_store.put(names("other"), b"", resource=b, token=1)  # b's mark row exists, to be locked

    async with holder.transaction():
        await holder.execute("SELECT token FROM fencegate_fences WHERE resource = $1 FOR UPDATE", b)
        late: Coroutine[Any, Any, object]
        if method == "PUT":
            late = pg_store.put(key, b"by b", resource=b, token=50)
        elif method == "GET":
            late = pg_store.get(key, resource=b, token=50)
        else:
            late = pg_store.delete(key, resource=b, token=50)
        request = asyncio.ensure_future(late)
        await eventually(lambda: _blocked_by(holder), what=f"the {method} under b waiting at b's fence")
        await pg_store.put(key, b"by a", resource=a, token=1)  # another replica creates the key under a

    with pytest.raises(BoundElsewhere) as refused:
        await request
    assert (refused.value.resource, refused.value.bound) == (b, a)
    stored = await pg_store.get(key, resource=a, token=None)
    assert (stored.data, stored.meta.resource, stored.meta.version) == (b"by a", a, 1)
    assert (await pg_store.mark(a), await pg_store.mark(b)) == (1, 1)
