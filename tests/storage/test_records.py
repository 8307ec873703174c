"""Audit entries and idempotency records, written in the transaction of the change, on every store path.

Each test runs on SQLite (one transaction per request), SQLite group commit
and the shared PostgreSQL, and checks the rows against what was decided.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from fencegate.lab.cluster import LocalCluster
from storage import BelowMark, ObjectNotFound, SqlObjectStore, migrate, open_engine
from storage.errors import IdempotencyKeyConflict
from storage.models import AuditEntry, IdempotencyRecord
from storage.protocols import Caller, ObjectStore, Refused
from storage.sqlite.group_commit import GroupCommitStore
from storage.verify import verify_audit

Names = Callable[[str], str]


@pytest.fixture(params=["sqlite", "group-commit", "postgresql"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[ObjectStore, SqlObjectStore]]:
    """(the store under test, the plain SQL store over the same database for reading rows back)."""
    if request.param == "postgresql":
        cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
        url = cluster.postgres_dsn
    else:
        url = f"sqlite:///{tmp_path / 'records.db'}"
    engine = open_engine(url)
    await migrate(engine)
    sql = SqlObjectStore(engine)
    try:
        if request.param == "group-commit":
            assert engine.url.database is not None
            batching = GroupCommitStore(sql, path=engine.url.database)
            await batching.start()
            try:
                yield batching, sql
            finally:
                await batching.aclose()
        else:
            yield sql, sql
    finally:
        await engine.dispose()


async def audit_rows(
    sql: SqlObjectStore, client: str
) -> list[tuple[str, str | None, int | None, int | None, int, str]]:
    cols = (
        AuditEntry.method,
        AuditEntry.key,
        AuditEntry.token,
        AuditEntry.mark,
        AuditEntry.status,
        AuditEntry.outcome,
    )
    async with sql.engine.connect() as conn:
        stmt = select(*cols).where(AuditEntry.client == client).order_by(AuditEntry.id)
        return [tuple(row) for row in (await conn.execute(stmt)).all()]  # type: ignore[misc]


async def test_accepted_requests_are_audited_with_their_write_and_stale_ones_are_not(
    backend: tuple[ObjectStore, SqlObjectStore], names: Names
) -> None:
    store, sql = backend
    caller = Caller(client=names("client"))
    key = names("k")
    await store.put(key, b"a", resource=key, token=5, caller=caller)
    with pytest.raises(BelowMark):
        await store.put(key, b"b", resource=key, token=4, caller=caller)
    await store.get(key, resource=key, token=6, caller=caller)
    await store.delete(key, resource=key, token=6, caller=caller)
    with pytest.raises(ObjectNotFound) as missing:
        await store.delete(key, resource=key, token=7, caller=caller)
    assert missing.value.audited
    assert await audit_rows(sql, caller.client) == [
        ("PUT", key, 5, 5, 201, "accepted"),
        ("GET", key, 6, 6, 200, "accepted"),
        ("DELETE", key, 6, 6, 200, "accepted"),
        ("DELETE", key, 7, 7, 404, "not_found"),
    ]


async def test_a_retry_with_the_same_idempotency_key_returns_the_first_outcome_once_applied(
    backend: tuple[ObjectStore, SqlObjectStore], names: Names
) -> None:
    store, sql = backend
    key = names("k")
    first_try = Caller(client=names("c"), idempotency_key="op-1", request_digest="d1")
    first = await store.put(key, b"v1", resource=key, token=5, caller=first_try)
    await store.put(key, b"v2", resource=key, token=6, caller=Caller(client=first_try.client))
    retry = await store.put(key, b"v1", resource=key, token=5, caller=first_try)
    assert retry == first  # created, version 1: not applied again, not refused by the newer token
    found = await store.get(key, resource=key, token=None)
    assert (found.data, found.meta.version) == (b"v2", 2)
    with pytest.raises(IdempotencyKeyConflict):
        await store.put(
            key,
            b"other",
            resource=key,
            token=7,
            caller=Caller(client=first_try.client, idempotency_key="op-1", request_digest="d2"),
        )
    assert await store.mark(key) == 6  # the refused reuse changed nothing
    outcomes = [row[-1] for row in await audit_rows(sql, first_try.client)]
    assert outcomes == ["accepted", "accepted", "replayed"]
    async with sql.engine.connect() as conn:
        stmt = select(IdempotencyRecord.token).where(IdempotencyRecord.client == first_try.client)
        assert (await conn.execute(stmt)).scalars().all() == [5]


async def test_a_record_from_before_the_content_type_joined_the_digest_still_matches_its_retry(
    backend: tuple[ObjectStore, SqlObjectStore], names: Names
) -> None:
    """Records written before an upgrade hold the digest without the Content-Type (`legacy_digest`):
    a retry across the upgrade replays, and only that one digest matches."""
    store, _ = backend
    key, client = names("k"), names("c")
    before = Caller(client=client, idempotency_key="op-1", request_digest="old")
    first = await store.put(key, b"v1", resource=key, token=5, caller=before)
    after = Caller(client=client, idempotency_key="op-1", request_digest="new", legacy_digest="old")
    assert await store.put(key, b"v1", resource=key, token=5, caller=after) == first
    other = Caller(client=client, idempotency_key="op-1", request_digest="new", legacy_digest="other")
    with pytest.raises(IdempotencyKeyConflict):
        await store.put(key, b"v1", resource=key, token=5, caller=other)
    assert (await store.get(key, resource=key, token=None)).meta.version == 1


async def test_a_retried_delete_returns_its_first_outcome_not_404(
    backend: tuple[ObjectStore, SqlObjectStore], names: Names
) -> None:
    store, _ = backend
    key = names("k")
    await store.put(key, b"x", resource=key, token=3)
    caller = Caller(client=names("c"), idempotency_key="del-1", request_digest="dd")
    first = await store.delete(key, resource=key, token=3, caller=caller)
    assert await store.delete(key, resource=key, token=3, caller=caller) == first


async def test_concurrent_writes_with_one_idempotency_key_apply_once(
    backend: tuple[ObjectStore, SqlObjectStore], names: Names
) -> None:
    store, _ = backend
    key = names("k")
    caller = Caller(client=names("c"), idempotency_key="burst", request_digest="same")
    results = await asyncio.gather(
        *(store.put(key, b"v", resource=key, token=9, caller=caller) for _ in range(8)),
        return_exceptions=True,
    )
    accepted = [r for r in results if not isinstance(r, BaseException)]
    assert accepted, results
    assert {r.version for r in accepted} == {1}  # every answer is the first outcome
    assert (await store.get(key, resource=key, token=None)).meta.version == 1


async def test_refusals_are_appended_and_verify_reads_the_whole_trail(
    backend: tuple[ObjectStore, SqlObjectStore], names: Names
) -> None:
    store, sql = backend
    client = names("c")
    key = names("k")
    await store.put(key, b"x", resource=key, token=8, caller=Caller(client=client))
    refused = Refused(
        at=datetime.now(UTC),
        client=client,
        method="PUT",
        key=key,
        resource=key,
        token=2,
        mark=8,
        status=409,
        outcome="stale_token",
    )
    await store.record_refusals([refused])
    assert [row[-1] for row in await audit_rows(sql, client)] == ["accepted", "stale_token"]
    report = await verify_audit(sql.engine)
    assert report.ok, report.violations
    assert report.highest[key] == 8
    assert report.outcomes["stale_token"] >= 1
