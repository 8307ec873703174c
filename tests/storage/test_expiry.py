"""Idempotency records expire: the old ones go, the young stay, and two replicas at once share the work.

On real SQLite and PostgreSQL (a database of its own per test, so the
counts are this test's alone). Records are written with SQL at a time long
past, and expired with a cutoff between them and now; on SQLite also by the
group-commit writer, inside its batches, with fenced PUTs in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.storage_tls import open_storage
from storage import SqlObjectStore, migrate
from storage.expiry import expire_idempotency
from storage.models import IdempotencyRecord
from storage.sqlite.group_commit import GroupCommitStore
from tests.databases import ENGINES, engine_url

LONG_AGO = datetime(2001, 1, 1, tzinfo=UTC)


@pytest.fixture(params=ENGINES)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with engine_url(request, tmp_path, "expiry") as found:
        yield found


@pytest.fixture
async def engine(url: str) -> AsyncIterator[AsyncEngine]:
    engine = open_storage(url)
    await migrate(engine)
    try:
        yield engine
    finally:
        await engine.dispose()


def record(n: int, at: datetime) -> dict[str, Any]:
    return {
        "client": "key:expiry",
        "idempotency_key": f"idem-{n}",
        "request_digest": "0" * 64,
        "key": f"k/{n}",
        "resource": f"k/{n}",
        "token": 1,
        "version": 1,
        "size": 0,
        "digest": "0" * 64,
        "created": True,
        "at": at,
    }


async def write(engine: AsyncEngine, rows: list[dict[str, Any]]) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(IdempotencyRecord), rows)


async def kept(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set((await conn.execute(select(IdempotencyRecord.idempotency_key))).scalars())


async def test_records_before_the_cutoff_are_deleted_and_the_younger_kept(engine: AsyncEngine) -> None:
    now = datetime.now(UTC)
    old = [record(n, LONG_AGO + timedelta(seconds=n)) for n in range(1_234)]
    young = [record(n, now - timedelta(minutes=1)) for n in range(1_234, 1_240)]
    await write(engine, old + young)
    deleted = await expire_idempotency(engine, before=now - timedelta(hours=1), batch=100)
    assert deleted == len(old)
    assert await kept(engine) == {row["idempotency_key"] for row in young}
    assert await expire_idempotency(engine, before=now - timedelta(hours=1)) == 0


async def test_two_replicas_expiring_at_once_delete_each_record_once_and_leave_none(
    url: str, engine: AsyncEngine
) -> None:
    await write(engine, [record(n, LONG_AGO + timedelta(milliseconds=n)) for n in range(6_000)])
    replicas = [open_storage(url) for _ in range(2)]
    try:
        counts = await asyncio.gather(
            *(expire_idempotency(e, before=LONG_AGO + timedelta(days=1), batch=200) for e in replicas)
        )
    finally:
        for replica in replicas:
            await replica.dispose()
    assert sum(counts) == 6_000, counts
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(IdempotencyRecord))).scalar_one() == 0


async def test_on_sqlite_the_group_commit_writer_deletes_each_batch_inside_its_own_transactions(
    tmp_path: Path,
) -> None:
    """With fenced PUTs in flight and without: every old record goes, each batch in a group commit
    (the batch count rises with the steps, none commits alone beside the writer), every PUT lands."""
    path = tmp_path / "writer.db"
    engine = open_storage(f"sqlite:///{path}")
    await migrate(engine)
    now = datetime.now(UTC)
    await write(engine, [record(n, LONG_AGO + timedelta(milliseconds=n)) for n in range(2_500)])
    await write(engine, [record(n, now) for n in range(2_500, 2_510)])
    store = GroupCommitStore(SqlObjectStore(engine), path=str(path))
    await store.start()
    try:
        before = store.batches
        puts = [store.put(f"p/{n}", b"x", resource=f"p/{n}", token=1) for n in range(300)]
        expiring = expire_idempotency(engine, before=now - timedelta(hours=1), batch=100, step=store.expire)
        deleted, written = await asyncio.gather(expiring, asyncio.gather(*puts))
        assert deleted == 2_500
        assert [meta.version for meta in written] == [1] * len(puts)
        assert store.batches - before >= 26  # 25 full steps and the one that found fewer than 100
        assert await kept(engine) == {f"idem-{n}" for n in range(2_500, 2_510)}
        assert await store.expire(now - timedelta(hours=1), 100) == 0  # no traffic: a batch of its own
    finally:
        await store.aclose()
        await engine.dispose()
