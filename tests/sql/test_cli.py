"""`fencegate sql install|uninstall` on real PostgreSQL and SQLite: what it creates, that a second run
changes nothing and says so, and that every mistake is one line, exit 2, with nothing created."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from fencegate.cli import main
from fencegate.lab.cluster import LocalCluster
from lockclient.sql import install_statements, marks_statements
from tests.databases import fresh_database

TABLE = "CREATE TABLE orders (id INTEGER PRIMARY KEY, shop TEXT NOT NULL, fence BIGINT, note INTEGER)"
COLUMNS = ["--table", "orders", "--token-column", "fence", "--resource-column", "shop"]


def sql(*argv: str) -> int:
    return main(["--log-level", "ERROR", "sql", *argv])


@pytest.fixture
def app_db(tmp_path: Path) -> Path:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute(TABLE)
        conn.execute("INSERT INTO orders VALUES (1, 'shop-a', NULL, 7)")  # a row from before the fence
    return path


def objects(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT name FROM sqlite_master ORDER BY name")]


def test_print_shows_the_sql_that_install_runs_and_connects_nowhere(
    capsys: pytest.CaptureFixture[str],
) -> None:
    unreachable = "postgresql://app@127.0.0.1:1/shop"
    assert sql("install", "--url", unreachable, *COLUMNS, "--print") == 0
    shown = capsys.readouterr().out
    expected = install_statements("postgresql", table="orders", token_column="fence", resource_column="shop")
    assert shown == "".join(f"{statement};\n\n" for statement in expected)
    assert sql("install", "--url", unreachable, "--marks-only", "--print") == 0
    assert capsys.readouterr().out.startswith(marks_statements("postgresql")[0] + ";")


def test_install_on_sqlite_fences_the_table_and_a_second_install_says_it_changed_nothing(
    app_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{app_db}"
    assert sql("install", "--url", url, *COLUMNS) == 0
    assert "installed the trigger on orders" in capsys.readouterr().out
    assert objects(app_db) == [
        "fencegate_fence_orders_insert",
        "fencegate_fence_orders_update",
        "fencegate_marks",
        "fencegate_sql_schema",
        "orders",
        "sqlite_autoindex_fencegate_marks_1",
        "sqlite_autoindex_fencegate_sql_schema_1",
    ]
    assert sql("install", "--url", url, *COLUMNS, "--json") == 0
    assert json.loads(capsys.readouterr().out) == {
        "action": "install", "table": "orders", "dialect": "sqlite", "changed": False,
    }  # fmt: skip
    with sqlite3.connect(app_db) as conn:
        conn.execute("UPDATE orders SET fence = 9 WHERE id = 1")
        with pytest.raises(sqlite3.IntegrityError, match="fencegate_stale_token"):
            conn.execute("INSERT INTO orders VALUES (2, 'shop-a', 8, 0)")
        assert conn.execute("SELECT * FROM orders").fetchall() == [(1, "shop-a", 9, 7)]
        assert conn.execute("SELECT * FROM fencegate_sql_schema ORDER BY 1").fetchall() == [
            ("marks", 1),
            ("trigger:orders", 1),
        ]
    assert sql("uninstall", "--url", url, "--table", "orders") == 0
    assert "uninstalled the trigger on orders" in capsys.readouterr().out
    assert sql("uninstall", "--url", url, "--table", "orders") == 0
    assert "nothing changed" in capsys.readouterr().out
    assert "fencegate_fence_orders_insert" not in objects(app_db)
    assert "fencegate_marks" in objects(app_db)


async def test_install_on_postgresql_runs_in_one_transaction_and_is_idempotent(
    postgres_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    async with fresh_database(postgres_cluster, prefix="cli") as url:
        engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1))
        try:
            async with engine.begin() as conn:
                await conn.execute(text(TABLE.replace("INTEGER PRIMARY KEY", "SERIAL PRIMARY KEY")))
            wrong = ["--table", "orders", "--token-column", "note", "--resource-column", "shop"]
            assert await asyncio.to_thread(sql, "install", "--url", url, *wrong) == 2
            assert "the column is integer, not a 64-bit integer" in capsys.readouterr().err
            async with engine.connect() as conn:
                assert await conn.scalar(text("SELECT to_regclass('fencegate_marks')")) is None
            assert await asyncio.to_thread(sql, "install", "--url", url, *COLUMNS, "--json") == 0
            assert json.loads(capsys.readouterr().out)["changed"] is True
            assert await asyncio.to_thread(sql, "install", "--url", url, *COLUMNS) == 0
            assert "already installed: nothing changed" in capsys.readouterr().out
            async with engine.connect() as conn:
                found = await conn.scalar(
                    text("SELECT count(*) FROM pg_trigger WHERE tgname = 'fencegate_fence_orders'")
                )
                assert found == 1
            assert await asyncio.to_thread(sql, "uninstall", "--url", url, "--table", "orders") == 0
        finally:
            await engine.dispose()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--table", "missing", "--token-column", "fence", "--resource-column", "shop"], "no table missing"),
        (["--table", "orders", "--token-column", "nope", "--resource-column", "shop"], "has no such column"),
        (
            ["--table", "orders", "--token-column", "shop", "--resource-column", "shop"],
            "not a 64-bit integer",
        ),
        (["--table", "orders", "--token-column", "fence", "--resource-column", "note"], "not text"),
        (["--table", "orders", "--token-column", "fence"], "exactly one of them"),
        (["--table", "orders;x", "--token-column", "fence", "--resource", "r"], "not a plain SQL name"),
        (["--table", "orders", "--token-column", "fence", "--resource", "a b"], "resource"),
        (["--marks-only", "--table", "orders"], "without --table"),
        (["--token-column", "fence"], "needs --table"),
    ],
)
def test_a_mistake_is_one_line_exit_2_and_nothing_created(
    app_db: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    before = objects(app_db)
    assert sql("install", "--url", f"sqlite:///{app_db}", *argv) == 2
    err = capsys.readouterr().err
    assert said in err
    assert err.count("\n") == 1
    assert objects(app_db) == before


def test_a_database_it_cannot_reach_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.db"
    assert sql("install", "--url", f"sqlite:///{missing}", *COLUMNS) == 2
    assert "no SQLite database at" in capsys.readouterr().err
    assert not missing.exists()  # nothing created, not even an empty file
    url = f"postgresql://app:secret@127.0.0.1:{closed_port()}/shop"
    assert sql("install", "--url", url, *COLUMNS, "--timeout", "2") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "could not install" in err
    assert "secret" not in err
    assert sql("uninstall", "--url", "mysql://app@db/shop", "--table", "orders") == 2
    assert "postgresql:// or sqlite:///" in capsys.readouterr().err


def test_an_install_that_fails_half_way_leaves_nothing(
    app_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One transaction: a statement refused after the marks table was created takes it back too."""
    with sqlite3.connect(app_db) as conn:
        conn.execute("CREATE VIEW fencegate_sql_schema AS SELECT 'x' AS component, 1 AS version")
    before = objects(app_db)
    assert sql("install", "--url", f"sqlite:///{app_db}", *COLUMNS) == 2
    err = capsys.readouterr().err
    assert "could not install" in err
    assert "nothing was changed" in err
    assert objects(app_db) == before
