"""PostgreSQL group commit under concurrency: fence rows in one step and in resource order, and a race
costs only the request that met it.

On a fresh database of its own on the suite's PostgreSQL. The first test
records the statements a batch sends; the second holds another
transaction's claim open until the batch waits on it, then commits it; the
last runs two replicas' writers at once on shared resources with and
without Idempotency-Keys and counts deadlocks.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from fencegate.lab.cluster import LocalCluster
from storage import SqlObjectStore, StaleToken, migrate, open_engine, pgbatch, pgconn, verify_audit
from storage.fenced import FENCED
from storage.pgbatch import PgGroupCommitStore, run_lockstep
from storage.protocols import Caller, FencedRequest
from tests.databases import fresh_database
from tests.waiting import eventually


@pytest.fixture
async def url(postgres_cluster: LocalCluster) -> AsyncIterator[str]:
    async with fresh_database(postgres_cluster, "lockstep") as fresh:
        engine = open_engine(fresh)
        try:
            await migrate(engine)
        finally:
            await engine.dispose()
        yield fresh


class _Recording:
    """An asyncpg connection whose `fetchmany` calls are recorded: (statement text, argument tuples)."""

    def __init__(self, pg: Any) -> None:
        self._pg = pg
        self.sent: list[tuple[str, Sequence[tuple[Any, ...]]]] = []

    async def fetchmany(self, text: str, args: Sequence[tuple[Any, ...]]) -> Any:
        self.sent.append((text, args))
        return await self._pg.fetchmany(text, args)


def _put(key: str, resource: str, token: int, idempotency_key: str | None = None) -> FencedRequest:
    caller = Caller("c", idempotency_key, f"digest-{key}-{token}" if idempotency_key else "")
    return FencedRequest("PUT", key, resource, token, b"x", caller=caller)


async def test_a_batch_takes_its_fence_rows_in_one_step_in_resource_order(url: str) -> None:
    """Requests with an Idempotency-Key look it up first; the others' fence upserts wait for them, so
    no batch holds some fence rows while it waits to take others (two such batches deadlock)."""
    requests = [  # sorted by resource, as a batch is
        _put("k/a", "r-a", 1, idempotency_key="retry-1"),
        _put("k/b", "r-b", 1),
        _put("k/c", "r-c", 1, idempotency_key="retry-2"),
        _put("k/d", "r-d", 1),
    ]
    sql = pgconn.Compiled()
    fence = sql.text["fence_upsert"]
    resource_at = [name for name, _ in sql.order["fence_upsert"]].index("resource")
    pg = await asyncpg.connect(url)
    try:
        recording = _Recording(pg)
        async with pg.transaction():
            await run_lockstep(recording, sql, requests, now=datetime.now(UTC), policy=FENCED)
    finally:
        await pg.close()
    fence_steps = [args for text, args in recording.sent if text == fence]
    assert len(fence_steps) == 1, f"fence rows taken over {len(fence_steps)} steps"
    [resources] = [[row[resource_at] for row in args] for args in fence_steps]
    assert resources == ["r-a", "r-b", "r-c", "r-d"]
    lookups = [i for i, (text, _) in enumerate(recording.sent) if text == sql.text["idempotency_select"]]
    assert lookups
    assert lookups[0] < [text for text, _ in recording.sent].index(fence)


async def test_a_request_that_met_a_concurrent_claim_does_not_fail_its_batch_mates(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another transaction binds a new key while a batch waits to bind it: that request goes back to
    the queue and meets the committed binding; its batch-mate commits in the batch's next run. With a
    single run allowed, a whole-batch rerun would have answered both 503."""
    monkeypatch.setattr(pgbatch, "MAX_RUNS", 1)
    engine = open_engine(url)
    store = PgGroupCommitStore(SqlObjectStore(engine), engine=engine, lanes=1)
    await store.start()
    other, watcher = await asyncpg.connect(url), await asyncpg.connect(url)
    try:
        claim = other.transaction()
        await claim.start()
        await other.execute(
            "INSERT INTO fencegate_bindings (key, resource, created_at) VALUES ('race/k', 'r1', now())"
        )
        raced = asyncio.create_task(store.put("race/k", b"1", resource="r1", token=5))
        mate = asyncio.create_task(store.put("race/mate", b"2", resource="r2", token=5))

        async def batch_waits_on_the_claim() -> bool:
            # read outside `other`'s transaction, which would keep seeing its first snapshot of the view
            waiting = await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            return bool(waiting)

        await eventually(batch_waits_on_the_claim, what="the batch waiting on the other binding")
        await claim.commit()
        meta_raced, meta_mate = await asyncio.gather(raced, mate)
        assert (meta_raced.resource, meta_raced.token, meta_raced.version) == ("r1", 5, 1)
        assert (meta_mate.resource, meta_mate.token, meta_mate.version) == ("r2", 5, 1)
        assert store.batches == 2  # the mate's run, then the raced request's own batch
    finally:
        await other.close()
        await watcher.close()
        await store.aclose()
        report = await verify_audit(engine)
        await engine.dispose()
    assert report.ok, report.violations
    assert report.outcomes["accepted"] == 2


async def test_two_replicas_with_and_without_idempotency_keys_never_deadlock(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Shared resources, fresh tokens, every third request with an Idempotency-Key, two writers in two
    lanes each: no deadlock is reported by PostgreSQL and no request is answered 503."""
    engines = [open_engine(url), open_engine(url)]
    stores = [PgGroupCommitStore(SqlObjectStore(e), engine=e, lanes=2) for e in engines]
    for store in stores:
        await store.start()
    tokens = iter(range(1, 10_000))
    answered: list[str] = []
    limit = asyncio.Semaphore(32)

    async def put(n: int) -> None:
        request_id = uuid.uuid4().hex if n % 3 == 0 else None
        async with limit:
            try:
                await stores[n % 2].put(
                    f"k/{n % 8}", b"x", resource=f"r{n % 8}", token=next(tokens),
                    caller=Caller("c", request_id, f"digest-{n}" if request_id else ""),
                )  # fmt: skip
                answered.append("ok")
            except StaleToken:
                answered.append("stale")  # a later token got there first: the fence at work

    try:
        with caplog.at_level(logging.INFO, logger=pgbatch.log.name):
            await asyncio.gather(*(put(n) for n in range(600)))
    finally:
        for store in stores:
            await store.aclose()
        report = await verify_audit(engines[0])
        for engine in engines:
            await engine.dispose()
    deadlocks = [r.getMessage() for r in caplog.records if "deadlock" in r.getMessage()]
    assert deadlocks == []
    assert len(answered) == 600
    assert report.ok, report.violations
