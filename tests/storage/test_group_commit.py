"""SQLite group commit: one transaction per batch, each fence checked in queue order.

A stale request is refused without failing its neighbours; a batch that
cannot commit answers every request in it `StorageUnavailable` and leaves
nothing behind.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from storage import BelowMark, ObjectNotFound, SqlObjectStore, StorageUnavailable, verify_audit
from storage.protocols import Refused
from storage.sqlite.batch_writer import INLINE_BYTES
from storage.sqlite.group_commit import GroupCommitStore
from tests.databases import migrated_store
from tests.waiting import eventually


@pytest.fixture
async def db_path(tmp_path: Path) -> Path:
    return tmp_path / "gc.db"


@pytest.fixture
async def sql(db_path: Path) -> AsyncIterator[SqlObjectStore]:
    async with migrated_store(f"sqlite:///{db_path}") as store:
        yield store


@pytest.fixture
async def batching(sql: SqlObjectStore, db_path: Path) -> AsyncIterator[GroupCommitStore]:
    store = GroupCommitStore(sql, path=str(db_path), busy_timeout=0.2)
    await store.start()
    try:
        yield store
    finally:
        await store.aclose()


async def test_a_batch_checks_each_fence_in_order_and_refuses_stale_alone(batching: GroupCommitStore) -> None:
    tokens = [5, 3, 7, 7, 2, 9]
    results = await asyncio.gather(
        *(batching.put(f"k{i}", str(t).encode(), resource="r", token=t) for i, t in enumerate(tokens)),
        return_exceptions=True,
    )
    refused = [i for i, r in enumerate(results) if isinstance(r, BelowMark)]
    assert refused == [1, 4]
    assert [(r.resource, r.token, r.highest) for r in results if isinstance(r, BelowMark)] == [
        ("r", 3, 5),
        ("r", 2, 7),
    ]
    assert batching.batches < len(tokens)
    assert await batching.mark("r") == 9
    for i, t in enumerate(tokens):
        if i in refused:
            with pytest.raises(ObjectNotFound):
                await batching.get(f"k{i}", resource="r", token=None)
        else:
            assert (await batching.get(f"k{i}", resource="r", token=None)).data == str(t).encode()


async def test_versions_and_reads_match_the_plain_store(batching: GroupCommitStore) -> None:
    first = await batching.put("v", b"1", resource="v", token=1)
    second = await batching.put("v", b"22", resource="v", token=1)
    read = await batching.get("v", resource="v", token=2)
    assert (first.version, first.created, second.version, second.created) == (1, True, 2, False)
    assert (read.data, read.meta.token, read.meta.version, read.meta.size) == (b"22", 1, 2, 2)
    deleted = await batching.delete("v", resource="v", token=3)
    assert (deleted.version, deleted.token, deleted.size) == (2, 3, 2)


async def test_fenced_get_and_delete_of_a_missing_key_still_raise_the_mark(
    batching: GroupCommitStore,
) -> None:
    with pytest.raises(ObjectNotFound):
        await batching.get("none", resource="m", token=4)
    with pytest.raises(ObjectNotFound):
        await batching.delete("none", resource="m", token=6)
    assert await batching.mark("m") == 6


async def test_a_batch_that_cannot_commit_fails_every_request_and_writes_nothing(
    batching: GroupCommitStore, db_path: Path
) -> None:
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock past the busy timeout
        results = await asyncio.gather(
            *(batching.put(f"b{i}", b"x", resource="b", token=i + 1) for i in range(3)),
            return_exceptions=True,
        )
        assert all(isinstance(r, StorageUnavailable) for r in results), results
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert await batching.mark("b") == 0
    assert await batching.list("b", after="", limit=10) == []
    assert (await batching.put("b0", b"x", resource="b", token=1)).version == 1


@pytest.mark.parametrize("queued_op", ["a fenced request", "refusals for the audit trail"])
async def test_a_request_cancelled_while_queued_is_never_run_and_refusals_are_still_written(
    sql: SqlObjectStore, db_path: Path, queued_op: str
) -> None:
    """A caller gave up (the request's deadline, a closed connection) before a batch took its request:
    the request leaves the queue, and the batch it would have joined runs without it. Refusals stay:
    the audit writer cancelled at shutdown must not lose them."""
    store = GroupCommitStore(sql, path=str(db_path), busy_timeout=60.0)
    await store.start()
    refusal = Refused(datetime.now(UTC), "c", "PUT", "x/queued", "x", 1, 5, 409, "stale_token")
    blocker = sqlite3.connect(db_path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # the batch in flight waits for the write lock
        first = asyncio.create_task(store.put("x/first", b"1", resource="x", token=1))
        await eventually(lambda: store._busy and not store._pending, what="the first batch in flight")
        queued: asyncio.Task[object] = asyncio.create_task(
            store.put("x/queued", b"q", resource="x", token=2)
            if queued_op == "a fenced request"
            else store.record_refusals([refusal])
        )
        await eventually(lambda: len(store._pending) == 1, what="the request in the queue")
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        blocker.execute("ROLLBACK")
        assert (await first).version == 1
        assert (await store.put("x/after", b"a", resource="x", token=1)).version == 1
    finally:
        blocker.close()
        await store.aclose()
    with pytest.raises(ObjectNotFound):
        await sql.read("x/queued", resource="x")
    assert await sql.mark("x") == 1
    report = await verify_audit(sql._engine)
    assert report.ok, report.violations
    assert report.outcomes["stale_token"] == (queued_op != "a fenced request")


async def test_close_commits_what_is_queued_then_refuses(sql: SqlObjectStore, db_path: Path) -> None:
    store = GroupCommitStore(sql, path=str(db_path))
    await store.start()
    pending = [asyncio.ensure_future(store.put(f"c{i}", b"x", resource="c", token=1)) for i in range(5)]
    await asyncio.sleep(0)  # let every put reach the queue
    await store.aclose()
    assert [p.result().version for p in pending] == [1] * 5
    with pytest.raises(StorageUnavailable, match="shutting down"):
        await store.put("late", b"x", resource="c", token=1)


async def test_a_batch_with_large_bodies_commits_in_the_writer_thread_with_the_same_results(
    batching: GroupCommitStore,
) -> None:
    big = b"b" * (INLINE_BYTES + 1)  # too large to run on the loop: the whole batch goes to the thread
    results = await asyncio.gather(
        batching.put("small", b"s", resource="L", token=2),
        batching.put("big", big, resource="L", token=3),
        batching.put("stale", b"s", resource="L", token=1),
        return_exceptions=True,
    )
    assert [type(r).__name__ for r in results] == ["ObjectMeta", "ObjectMeta", "BelowMark"]
    assert (await batching.get("big", resource="L", token=None)).data == big
    assert await batching.mark("L") == 3


async def test_a_store_that_cannot_open_its_file_fails_to_start_and_leaves_no_thread(
    sql: SqlObjectStore, tmp_path: Path
) -> None:
    store = GroupCommitStore(sql, path=str(tmp_path / "no-such-dir" / "gc.db"))
    with pytest.raises(sqlite3.OperationalError):
        await store.start()
    await eventually(
        lambda: all(t.name != "fencegate-sqlite-writer" for t in threading.enumerate()),
        what="the writer thread ending",
    )
    with pytest.raises(StorageUnavailable):
        await store.put("k", b"x", resource="k", token=1)
