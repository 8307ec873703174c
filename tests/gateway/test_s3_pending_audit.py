"""The audit trail of an `Idempotency-Key` retry that meets its first attempt still under way (S3 mode).

Two gateways on one real PostgreSQL in front of real SeaweedFS; replica A's
path to the store is held by the lab's `DelayProxy`. A's write claims the
record and is held; the retry through B meets the claim. Its entry then says
`pending` (202: not known yet), and a second entry, once A's write landed,
says what it was answered: never `replayed` before there is an outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from fencegate.lab.cluster import LocalCluster
from storage import open_engine
from storage.models import AuditEntry
from tests.gateway.conftest import MakeClient, create_database
from tests.gateway.s3_support import delayed_path, fresh_prefix, use_store
from tests.waiting import eventually

HOLD = 30.0  # seconds A's path holds: released by the test long before


async def _entries(engine: AsyncEngine, key: str) -> Sequence[tuple[str, int, int]]:
    query = select(AuditEntry.outcome, AuditEntry.status, AuditEntry.token).where(AuditEntry.key == key)
    async with engine.connect() as conn:
        rows = (await conn.execute(query.order_by(AuditEntry.id))).all()
    return [(row.outcome, row.status, row.token) for row in rows]


async def test_a_retry_meeting_a_claim_under_way_is_audited_pending_then_with_its_answer(
    make_client: MakeClient, s3_cluster: LocalCluster, postgres_cluster: LocalCluster,
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:  # fmt: skip
    store, prefix = s3_cluster.s3, fresh_prefix()
    use_store(monkeypatch, store, tmp_path)
    dsn = await create_database(postgres_cluster.postgres_dsn)
    upstream = f"s3://{store['bucket']}/{prefix}"
    engine = open_engine(dsn)
    async with delayed_path(store) as proxy:
        a = await make_client(
            storage=dsn, upstream=upstream, upstream_endpoint=f"http://127.0.0.1:{proxy.port}"
        )
        b = await make_client(storage=dsn, upstream=upstream, upstream_endpoint=store["endpoint"])
        headers = {"Fencing-Token": "7", "Idempotency-Key": "upload-1"}
        proxy.hold(HOLD)
        first = asyncio.ensure_future(a.put("/v1/objects/k", data=b"v", headers=headers))

        async def entries(count: int) -> bool:
            return len(await _entries(engine, "k")) >= count

        try:
            await eventually(lambda: entries(1), what="the first attempt's claim")
            retry = asyncio.ensure_future(b.put("/v1/objects/k", data=b"v", headers=headers))
            await eventually(lambda: entries(2), what="the retry meeting the claim")
            assert (await _entries(engine, "k"))[1] == ("pending", 202, 7)
            assert not retry.done()  # it waits for the claimant's answer
            proxy.hold(0)
            answers = [(await first).status, (await retry).status]
            assert answers == [201, 201]
            assert await _entries(engine, "k") == [
                ("accepted", 201, 7),
                ("pending", 202, 7),
                ("replayed", 201, 7),
            ]
        finally:
            proxy.hold(0)
            await engine.dispose()
