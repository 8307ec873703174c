"""The fence-off yardstick is the gateway minus the fence, and nothing else.

`bench.fenceoff` must really skip the fence (a lower token is accepted and
no mark is kept), or "fence on >= 0.9x fence off" would compare the gateway
with itself; and it must still be the durable, audited gateway, or the
ratio would flatter the fence.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import func, select

from fencegate.bench.servers import http_server
from fencegate.lab.cluster import LocalCluster
from storage import open_engine
from storage.models import AuditEntry, StoredObject
from tests.databases import fresh_database


@pytest.fixture(params=["sqlite", "postgresql"])
async def storage_args(request: pytest.FixtureRequest) -> AsyncIterator[list[str]]:
    if request.param == "sqlite":
        yield []
        return
    # A database of its own: the accepted lower token is a fence violation by design, and the
    # shared database's audit trail is verified whole by the storage tests.
    cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
    async with fresh_database(cluster, "fenceoff") as url:
        yield ["--storage", url]


def _storage_url(args: list[str], data_dir: Path) -> str:
    return args[1] if args else f"sqlite:///{data_dir / 'fencegate.db'}"


async def test_fence_off_accepts_a_lower_token_keeps_no_mark_and_still_audits(
    storage_args: list[str], tmp_path: Path
) -> None:
    key = f"fenceoff-{uuid.uuid4().hex[:12]}"
    data_dir = tmp_path / "gw"
    argv = [
        "fencegate.bench.fenceoff",
        "--log-level",
        "WARNING",
        "serve",
        "--data-dir",
        str(data_dir),
        *storage_args,
    ]
    with http_server(argv, tmp_path / "fenceoff.log") as (url, _pid):
        async with aiohttp.ClientSession(url) as session:
            statuses = []
            for token in (5, 3):  # 3 is below 5: a fenced gateway answers 409
                async with session.put(
                    f"/v1/objects/{key}", data=b"v", headers={"Fencing-Token": str(token)}
                ) as r:
                    statuses.append(r.status)
            async with session.get(f"/v1/fences/{key}") as r:
                fence = await r.json()
    assert statuses == [201, 200]
    assert fence["highest"] == 0
    engine = open_engine(_storage_url(storage_args, data_dir))
    try:
        async with engine.connect() as conn:
            version = (
                await conn.execute(select(StoredObject.version).where(StoredObject.key == key))
            ).scalar()
            audited = (
                await conn.execute(select(func.count()).select_from(AuditEntry).where(AuditEntry.key == key))
            ).scalar()
    finally:
        await engine.dispose()
    assert version == 2
    assert audited == 2
