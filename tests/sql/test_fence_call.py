"""`fence()` in the caller's transaction, on real PostgreSQL and SQLite, through each SQLAlchemy form.

Every test reads what the database itself holds afterwards (the mark's row, the caller's rows), not
only what the call answered.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from fencegate.lab.cluster import LocalCluster
from lockclient import Redlock, SQLiteTokens
from lockclient.errors import ConfigurationError, LockLost, StaleToken
from lockclient.sql import create_marks, fence, fenced, install_statements
from tests.waiting import eventually

USER_TABLE = "CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)"


async def mark(engine: AsyncEngine, resource: str) -> int | None:
    async with engine.connect() as conn:
        found = await conn.scalar(
            text("SELECT token FROM fencegate_marks WHERE resource = :r"), {"r": resource}
        )
    return None if found is None else int(found)


async def rows(engine: AsyncEngine) -> list[tuple[int, int]]:
    async with engine.connect() as conn:
        return [tuple(row) for row in await conn.execute(text("SELECT id, amount FROM invoices ORDER BY id"))]


async def test_a_fresh_token_raises_the_mark_and_an_equal_one_is_accepted(
    engine: AsyncEngine, resource: str
) -> None:
    async with engine.begin() as conn:
        await fence(conn, resource, 5)
    async with engine.begin() as conn:
        await fence(conn, resource, 5)  # one lease writes many times
    assert await mark(engine, resource) == 5
    async with engine.begin() as conn:
        await fence(conn, resource, 9)
    assert await mark(engine, resource) == 9


async def test_a_stale_token_raises_stale_token_with_the_mark_and_the_rolled_back_writes_are_gone(
    engine: AsyncEngine, resource: str
) -> None:
    async with engine.begin() as conn:
        await conn.execute(text(USER_TABLE))
        await fence(conn, resource, 7)
        await conn.execute(text("INSERT INTO invoices VALUES (1, 100)"))
    async with engine.connect() as conn:
        await conn.execute(text("INSERT INTO invoices VALUES (2, 666)"))  # a write before the fence
        with pytest.raises(StaleToken) as refused:
            await fence(conn, resource, 6)
        await conn.rollback()
    assert (refused.value.resource, refused.value.token, refused.value.highest) == (resource, 6, 7)
    assert "below the mark 7" in str(refused.value)
    assert await mark(engine, resource) == 7
    assert await rows(engine) == [(1, 100)]


async def test_every_sqlalchemy_form_fences(engine: AsyncEngine, resource: str) -> None:
    """AsyncConnection and AsyncSession await it; Connection and Session (here on the async engine's own
    connection, as run_sync hands them over) fence at once and return None."""

    def sync_connection(conn: Connection, token: int) -> None:
        assert fence(conn, resource, token) is None

    def sync_session(session: Session, token: int) -> None:
        assert fence(session, resource, token) is None

    async with engine.begin() as conn:
        await fence(conn, resource, 1)
    async with AsyncSession(engine) as session, session.begin():
        await fence(session, resource, 2)
    async with engine.begin() as conn:
        await conn.run_sync(sync_connection, 3)
    async with AsyncSession(engine) as session, session.begin():
        await session.run_sync(sync_session, 4)
    assert await mark(engine, resource) == 4
    with pytest.raises(StaleToken):
        async with AsyncSession(engine) as session, session.begin():
            await session.run_sync(sync_session, 3)


def test_a_plain_sync_engine_fences(tmp_path: Path, resource: str) -> None:
    """The stdlib sqlite3 driver through a sync Engine: no event loop anywhere."""
    engine = create_engine(f"sqlite:///{tmp_path}/sync.db")
    try:
        with engine.begin() as conn:
            create_marks(conn)
            fence(conn, resource, 3)
        with pytest.raises(StaleToken), engine.begin() as conn:
            fence(conn, resource, 2)
        with Session(engine) as session, session.begin():
            fence(session, resource, 4)
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT token FROM fencegate_marks")) == 4
    finally:
        engine.dispose()


async def test_the_async_with_form_begins_fences_and_commits(engine: AsyncEngine, resource: str) -> None:
    class Held:
        token = 11
        resource = ""

    lease = Held()
    lease.resource = resource
    async with fenced(engine, lease) as conn:
        await conn.execute(text(USER_TABLE))
        await conn.execute(text("INSERT INTO invoices VALUES (1, 1)"))
    assert (await mark(engine, resource), await rows(engine)) == (11, [(1, 1)])
    lease.token = 10
    with pytest.raises(StaleToken):
        async with fenced(engine, lease) as conn:
            await conn.execute(text("INSERT INTO invoices VALUES (2, 2)"))
    async with engine.connect() as conn:
        with pytest.raises(StaleToken):
            async with fenced(conn, lease):
                pass
        await conn.rollback()
        lease.token = 12
        async with conn.begin():  # joined: this block's owner commits
            async with fenced(conn, lease) as joined:
                assert joined is conn
                await conn.execute(text("INSERT INTO invoices VALUES (3, 3)"))
            assert conn.in_transaction()
    assert (await mark(engine, resource), await rows(engine)) == (12, [(1, 1), (3, 3)])


async def test_on_postgresql_a_second_fence_waits_for_the_first_transaction_then_sees_its_mark(
    pg_url: str, resource: str
) -> None:
    """READ COMMITTED: the mark's row stays locked to the first transaction's end; an older token that
    waited behind it is refused once it commits, a newer one then goes through."""
    engine = create_async_engine(pg_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(create_marks)
        async with engine.connect() as first, engine.connect() as second, engine.connect() as third:
            _ = await first.begin()
            await fence(first, resource, 20)
            older = asyncio.create_task(_fence_and_commit(second, resource, 15))
            newer = asyncio.create_task(_fence_and_commit(third, resource, 25))
            await eventually(lambda: _waiting(engine, 2), what="both fences waiting on the mark's row")
            assert not older.done()
            assert not newer.done()
            await first.commit()
            results = await asyncio.gather(older, newer, return_exceptions=True)
        assert isinstance(results[0], StaleToken)
        assert results[0].highest in (20, 25)
        assert results[1] is None
        assert await mark(engine, resource) == 25
    finally:
        await engine.dispose()


async def _fence_and_commit(conn: AsyncConnection, resource: str, token: int) -> None:
    async with conn.begin():
        await fence(conn, resource, token)


async def _waiting(engine: AsyncEngine, count: int) -> bool:
    """Whether `count` sessions of this database wait on a lock."""
    async with engine.connect() as conn:
        found = await conn.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        )
    return bool(found == count)


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
async def test_on_postgresql_a_mark_changed_since_the_snapshot_is_a_serialization_failure(
    pg_url: str, resource: str, isolation: str
) -> None:
    """The driver's retryable error (SQLSTATE 40001), not StaleToken and not a silent pass: the snapshot
    read an older mark than the one now committed. A retry of the whole transaction sees the new mark."""
    engine = create_async_engine(pg_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(create_marks)
            await fence(conn, resource, 1)
        async with engine.connect() as late:
            late = await late.execution_options(isolation_level=isolation.replace(" ", "_"))
            _ = await late.begin()
            await late.execute(text("SELECT 1"))  # the snapshot is taken
            async with engine.begin() as other:
                await fence(other, resource, 5)
            with pytest.raises(DBAPIError) as failed:
                await fence(late, resource, 9)
            assert getattr(failed.value.orig, "sqlstate", None) == "40001"
            await late.rollback()
            async with late.begin():
                await fence(late, resource, 9)
        assert await mark(engine, resource) == 9
    finally:
        await engine.dispose()


async def test_a_released_lease_of_a_real_redlock_is_refused_as_lost(
    engine: AsyncEngine, redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    async with Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker:
        async with locker.lock("orders/lost", ttl=10.0) as lease, fenced(engine, lease):
            pass
        async with engine.begin() as conn:
            with pytest.raises(LockLost):
                await fence(conn, lease)  # released: the client knows it is no longer held
    assert await mark(engine, "orders/lost") == lease.token


async def test_on_postgresql_a_database_without_the_marks_table_is_named_so(pg_url: str) -> None:
    bare = create_async_engine(pg_url)
    try:
        async with bare.connect() as conn:
            with pytest.raises(ConfigurationError, match="create_marks"):
                await fence(conn, "orders", 5)
            await conn.rollback()
            assert await conn.scalar(text("SELECT to_regclass('fencegate_marks')")) is None
    finally:
        await bare.dispose()


async def test_the_call_and_the_trigger_fence_one_table_together(engine: AsyncEngine, resource: str) -> None:
    """A writer that calls fence() and then writes the row passes both (equal tokens pass); one that
    does not, with an older token, is refused by the trigger."""
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE stock (item TEXT PRIMARY KEY, count INTEGER, fence BIGINT)"))
        for statement in install_statements(
            engine.dialect.name, table="stock", token_column="fence", resource=resource
        ):
            await conn.exec_driver_sql(statement)
    async with engine.begin() as conn:
        await fence(conn, resource, 4)
        await conn.execute(text("INSERT INTO stock VALUES ('apples', 10, 4)"))
    with pytest.raises(DBAPIError):
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE stock SET count = 0, fence = 3"))
    with pytest.raises(StaleToken):
        async with engine.begin() as conn:
            await fence(conn, resource, 3)
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count, fence FROM stock"))).all() == [(10, 4)]
    assert await mark(engine, resource) == 4
