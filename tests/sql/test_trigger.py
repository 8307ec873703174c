"""The trigger's SQL on real PostgreSQL and SQLite: every writer of the table is fenced, whether or not it
knows of fencing; what it refuses leaves the row, the mark and the user's other tables as they were."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from lockclient.errors import ConfigurationError
from lockclient.sql import install_statements, uninstall_statements

ORDERS = "CREATE TABLE orders (id INTEGER PRIMARY KEY, shop TEXT NOT NULL, amount INTEGER, fence BIGINT)"
OTHER = "CREATE TABLE audit (id INTEGER PRIMARY KEY, note TEXT)"


async def run(conn: AsyncConnection, statements: list[str]) -> None:
    for statement in statements:
        await conn.exec_driver_sql(statement)


@pytest.fixture
async def orders(engine: AsyncEngine) -> AsyncEngine:
    """`orders` fenced per shop (its resource column), beside a table the install must not touch."""
    async with engine.begin() as conn:
        await conn.execute(text(ORDERS))
        await conn.execute(text(OTHER))
        await conn.execute(text("INSERT INTO audit VALUES (1, 'kept')"))
        await run(
            conn,
            install_statements(
                engine.dialect.name, table="orders", token_column="fence", resource_column="shop"
            ),
        )
    return engine


async def write(engine: AsyncEngine, sql: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(text(sql))


async def state(engine: AsyncEngine) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    async with engine.connect() as conn:
        rows = [
            tuple(r)
            for r in await conn.execute(text("SELECT id, shop, amount, fence FROM orders ORDER BY id"))
        ]
        marks = [
            tuple(r)
            for r in await conn.execute(text("SELECT resource, token FROM fencegate_marks ORDER BY 1"))
        ]
    return rows, marks


def refusal(exc: DBAPIError, dialect: str) -> str:
    """The SQLSTATE (PostgreSQL) or the message's code word (SQLite) of a refused write."""
    if dialect == "postgresql":
        return str(getattr(exc.orig, "sqlstate", None))
    return str(exc.orig).split(":")[0]


STALE = {"postgresql": "FG409", "sqlite": "fencegate_stale_token"}
BAD_TOKEN = {"postgresql": "FG400", "sqlite": "fencegate_bad_token"}
BAD_RESOURCE = {"postgresql": "FG400", "sqlite": "fencegate_bad_resource"}
MOVED = {"postgresql": "FG422", "sqlite": "fencegate_resource_changed"}


async def test_a_writer_that_never_calls_fence_is_fenced(orders: AsyncEngine) -> None:
    dialect = orders.dialect.name
    await write(orders, "INSERT INTO orders VALUES (1, 'shop-a', 10, 5)")
    await write(orders, "UPDATE orders SET amount = 11 WHERE id = 1")  # the row's token, still the mark
    await write(orders, "INSERT INTO orders VALUES (2, 'shop-b', 1, 3)")  # another resource, its own mark
    before = await state(orders)
    assert before == ([(1, "shop-a", 11, 5), (2, "shop-b", 1, 3)], [("shop-a", 5), ("shop-b", 3)])
    await write(orders, "UPDATE orders SET amount = 12, fence = 8 WHERE id = 1")
    with pytest.raises(DBAPIError) as stale:
        await write(orders, "INSERT INTO orders VALUES (3, 'shop-a', 99, 7)")
    assert refusal(stale.value, dialect) == STALE[dialect]
    if dialect == "postgresql":
        assert re.search(r"resource shop-a token 7 is below the mark 8", str(stale.value.orig))
    with pytest.raises(DBAPIError) as stale_update:
        await write(orders, "UPDATE orders SET amount = 0, fence = 6 WHERE id = 1")
    assert refusal(stale_update.value, dialect) == STALE[dialect]
    assert await state(orders) == (
        [(1, "shop-a", 12, 8), (2, "shop-b", 1, 3)],
        [("shop-a", 8), ("shop-b", 3)],
    )


async def test_an_update_that_keeps_an_older_rows_token_is_stale(orders: AsyncEngine) -> None:
    """A writer that sets no token keeps the row's: below a newer mark it is refused, as a stale one."""
    await write(orders, "INSERT INTO orders VALUES (1, 'shop-a', 1, 5)")
    await write(orders, "INSERT INTO orders VALUES (2, 'shop-a', 1, 9)")
    with pytest.raises(DBAPIError) as stale:
        await write(orders, "UPDATE orders SET amount = 2 WHERE id = 1")
    assert refusal(stale.value, orders.dialect.name) == STALE[orders.dialect.name]


@pytest.mark.parametrize("token", [None, 0, -1])
async def test_a_missing_or_impossible_token_is_refused(orders: AsyncEngine, token: int | None) -> None:
    with pytest.raises(DBAPIError) as bad:
        async with orders.begin() as conn:
            await conn.execute(text("INSERT INTO orders VALUES (1, 'shop-a', 1, :token)"), {"token": token})
    assert refusal(bad.value, orders.dialect.name) == BAD_TOKEN[orders.dialect.name]
    assert await state(orders) == ([], [])


@pytest.mark.parametrize("shop", ["", "a b", "a/../b", "a//b", "x" * 257, "caf\u00e9"])
async def test_a_resource_the_gateway_would_refuse_is_refused(orders: AsyncEngine, shop: str) -> None:
    with pytest.raises(DBAPIError) as bad:
        async with orders.begin() as conn:
            await conn.execute(text("INSERT INTO orders VALUES (1, :shop, 1, 5)"), {"shop": shop})
    assert refusal(bad.value, orders.dialect.name) == BAD_RESOURCE[orders.dialect.name]
    assert await state(orders) == ([], [])


async def test_a_row_cannot_move_to_another_resource(orders: AsyncEngine) -> None:
    """Else a stale writer would name a fresh resource (mark 0) and overwrite the row."""
    await write(orders, "INSERT INTO orders VALUES (1, 'shop-a', 1, 9)")
    with pytest.raises(DBAPIError) as moved:
        await write(orders, "UPDATE orders SET shop = 'fresh', amount = 0, fence = 2 WHERE id = 1")
    assert refusal(moved.value, orders.dialect.name) == MOVED[orders.dialect.name]
    assert await state(orders) == ([(1, "shop-a", 1, 9)], [("shop-a", 9)])


async def test_one_fixed_resource_for_the_whole_table(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text(ORDERS))
        await run(
            conn,
            install_statements(engine.dialect.name, table="orders", token_column="fence", resource="ledger"),
        )
    await write(engine, "INSERT INTO orders VALUES (1, 'x', 1, 4)")
    with pytest.raises(DBAPIError):
        await write(engine, "INSERT INTO orders VALUES (2, 'y', 1, 3)")  # another row, the same mark
    assert (await state(engine))[1] == [("ledger", 4)]


async def test_install_twice_changes_nothing_and_uninstall_removes_only_the_trigger(
    orders: AsyncEngine,
) -> None:
    dialect = orders.dialect.name
    await write(orders, "INSERT INTO orders VALUES (1, 'shop-a', 1, 9)")
    async with orders.begin() as conn:
        await run(
            conn, install_statements(dialect, table="orders", token_column="fence", resource_column="shop")
        )
    assert await state(orders) == ([(1, "shop-a", 1, 9)], [("shop-a", 9)])
    async with orders.begin() as conn:
        await run(conn, uninstall_statements(dialect, table="orders"))
        await run(conn, uninstall_statements(dialect, table="orders"))  # idempotent too
    await write(orders, "UPDATE orders SET fence = 1 WHERE id = 1")  # no trigger now
    async with orders.connect() as conn:
        assert (await conn.execute(text("SELECT * FROM audit"))).all() == [(1, "kept")]
        assert (await conn.execute(text("SELECT resource, token FROM fencegate_marks"))).all() == [
            ("shop-a", 9)
        ]


@pytest.mark.parametrize(
    ("options", "wrong"),
    [
        ({"table": "orders; DROP TABLE audit", "token_column": "fence", "resource": "r"}, "table"),
        ({"table": "orders", "token_column": 'fence"', "resource": "r"}, "token column"),
        ({"table": "orders", "token_column": "fence", "resource_column": "1shop"}, "resource column"),
        ({"table": "orders", "token_column": "fence", "resource": "it's"}, "resource"),
        ({"table": "orders", "token_column": "fence"}, "exactly one"),
        (
            {"table": "orders", "token_column": "fence", "resource": "r", "resource_column": "shop"},
            "exactly one",
        ),
        ({"table": "a.b.c", "token_column": "fence", "resource": "r"}, "schema"),
    ],
)
def test_names_that_are_not_plain_sql_names_are_refused(options: dict[str, str], wrong: str) -> None:
    for dialect in ("postgresql", "sqlite"):
        with pytest.raises(ConfigurationError, match=wrong):
            install_statements(dialect, **options)
    with pytest.raises(ConfigurationError, match="PostgreSQL and SQLite"):
        install_statements("mysql", table="orders", token_column="fence", resource="r")
