"""PostgreSQL group commit under concurrency: fence rows in one step and in resource order, and a race
costs only the request that met it.

On a fresh database of its own on the suite's PostgreSQL. The first test
records the statements a batch sends; the second holds another
transaction's claim open until the batch waits on it, then commits it; the
third runs two replicas' writers at once on shared resources with and
without Idempotency-Keys and counts deadlocks. The last ones hold a fence
row locked so that a batch is stuck, and queue a request behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from fencegate.lab.cluster import LocalCluster
from storage import (
    BelowMark,
    ObjectNotFound,
    SqlObjectStore,
    StorageUnavailable,
    migrate,
    open_engine,
    verify_audit,
)
from storage.fenced import FENCED
from storage.postgresql import connections as pgconn
from storage.postgresql import group_commit as pgbatch
from storage.postgresql.group_commit import PgGroupCommitStore, run_lockstep
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
    sql = pgconn.PgStatements()
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
            except BelowMark:
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


@contextlib.asynccontextmanager
async def stuck_behind(url: str, resource: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Another transaction holds `resource`'s fence row; yields a wait for a batch to be stuck on it.
    The row is released on leaving."""
    holder, watcher = await asyncpg.connect(url), await asyncpg.connect(url)
    try:
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM fencegate_fences WHERE resource = $1 FOR UPDATE", resource)

            async def a_batch_waits() -> None:
                async def waiting() -> bool:
                    return bool(
                        await watcher.fetchval(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                        )
                    )

                await eventually(waiting, what="a batch waiting on the held fence row")

            yield a_batch_waits
    finally:
        await holder.close()
        await watcher.close()


@pytest.mark.parametrize("caller_gives_up", ["at the store's deadline", "by its own cancellation"])
async def test_a_request_queued_behind_a_stuck_batch_leaves_the_queue_unrun_when_its_caller_stops_waiting(
    url: str, caller_gives_up: str
) -> None:
    """The store's deadline counts from the moment a request is queued, not from when a batch takes it:
    a request behind a batch stuck on a lock is answered 503 once its own deadline passes (before, it
    waited that batch out and then its own batch's deadline), and it is never run; a caller cancelled
    while queued leaves the queue too. The stuck batch's request was answered 503 as well, its outcome
    unknown: it commits once the lock is released, and its retry with the same Idempotency-Key is a
    replay."""
    engine = open_engine(url, command_timeout=120.0)  # the statements outlive the store's deadline
    store = PgGroupCommitStore(SqlObjectStore(engine), engine=engine, lanes=1, timeout=0.5)
    await store.start()
    try:
        await store.put("q/stuck", b"1", resource="r-stuck", token=1)
        committed = store.batches
        async with stuck_behind(url, "r-stuck") as a_batch_waits:
            retry = Caller("c", "retry-stuck", "digest-stuck-2")
            stuck = asyncio.create_task(store.put("q/stuck", b"2", resource="r-stuck", token=2, caller=retry))
            await a_batch_waits()
            queued = asyncio.create_task(store.put("q/queued", b"q", resource="r-queued", token=1))
            async with asyncio.timeout(30):  # a test deadline: the stuck statement would wait 120 s
                if caller_gives_up == "by its own cancellation":
                    await eventually(lambda: len(store._pending) == 1, what="the request in the queue")
                    queued.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await queued
                else:
                    with pytest.raises(StorageUnavailable, match="not applied"):
                        await queued
                with pytest.raises(StorageUnavailable, match="outcome is unknown"):
                    await stuck
        assert (await store.put("q/after", b"a", resource="r-queued", token=1)).version == 1
        assert store.batches == committed + 2  # the stuck batch once released, then this one
        assert (await store.read("q/stuck", resource="r-stuck")).data == b"2"
        # the answer was "outcome unknown": the retry the message asks for replays it, not a second write
        replayed = await store.put("q/stuck", b"2", resource="r-stuck", token=2, caller=retry)
        assert (replayed.token, replayed.version) == (2, 2)
        with pytest.raises(ObjectNotFound):
            await store.read("q/queued", resource="r-queued")
    finally:
        await store.aclose()
        await engine.dispose()
