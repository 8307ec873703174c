"""What `fencegate sql` reads from the database's catalog before it creates anything.

The table must exist, its token column must hold any token (a 64-bit integer:
PostgreSQL `bigint`, SQLite INTEGER affinity) and its resource column a name
(PostgreSQL `text`, `varchar` or `char`; SQLite TEXT affinity), or the
install stops with one line and nothing created. Whether the trigger (or,
with `--marks-only`, the marks table) is already there decides whether an
install or an uninstall has anything to do.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from lockclient.errors import ConfigurationError
from lockclient.sql import MARKS_TABLE
from lockclient.sql._trigger import object_name, split_table

__all__ = ["check_columns", "installed"]

PG_TOKEN_TYPES = ("bigint",)
PG_RESOURCE_TYPES = ("text", "character varying", "character")


def _qualified(dialect: str, table: str) -> str:
    schema, name = split_table(dialect, table)
    return f'"{name}"' if schema is None else f'"{schema}"."{name}"'


async def _columns(conn: AsyncConnection, dialect: str, table: str) -> dict[str, str]:
    """Each column of `table` and its type, as the catalog names it; empty if there is no such table."""
    if dialect == "sqlite":
        _, name = split_table(dialect, table)
        rows = await conn.execute(text("SELECT name, type FROM pragma_table_info(:t)"), {"t": name})
        return {row[0]: str(row[1]).upper() for row in rows}
    rows = await conn.execute(
        text(
            "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute "
            "WHERE attrelid = to_regclass(:t) AND attnum > 0 AND NOT attisdropped"
        ),
        {"t": _qualified(dialect, table)},
    )
    return {row[0]: row[1] for row in rows}


def _holds_token(dialect: str, declared: str) -> bool:
    return "INT" in declared if dialect == "sqlite" else declared in PG_TOKEN_TYPES


def _holds_name(dialect: str, declared: str) -> bool:
    if dialect == "sqlite":
        return any(kind in declared for kind in ("CHAR", "CLOB", "TEXT"))
    return declared in PG_RESOURCE_TYPES


async def check_columns(
    conn: AsyncConnection, dialect: str, table: str, token_column: str, resource_column: str | None
) -> None:
    """`ConfigurationError` unless `table` exists with the token column (and resource column) it needs."""
    columns = await _columns(conn, dialect, table)
    if not columns:
        raise ConfigurationError(f"no table {table} in this database: create it first, or check --table")
    wanted = [("--token-column", token_column, _holds_token, "a 64-bit integer (BIGINT)")]
    if resource_column is not None:
        wanted.append(("--resource-column", resource_column, _holds_name, "text"))
    for option, column, fits, kind in wanted:
        if column not in columns:
            raise ConfigurationError(
                f"{option} {column}: {table} has no such column (it has {', '.join(sorted(columns))})"
            )
        if not fits(dialect, columns[column]):
            raise ConfigurationError(
                f"{option} {column}: the column is {columns[column] or 'untyped'}, not {kind}; "
                "a token is a 64-bit integer and a resource a name"
            )


async def installed(conn: AsyncConnection, dialect: str, table: str | None) -> bool:
    """Whether the trigger on `table` is there (the marks table, when `table` is None)."""
    if table is None:
        query = (
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = :name"
            if dialect == "sqlite"
            else "SELECT count(*) FROM pg_class WHERE oid = to_regclass(:name)"
        )
        return bool(await conn.scalar(text(query), {"name": MARKS_TABLE}))
    schema, name = split_table(dialect, table)
    owner = object_name(name if schema is None else f"{schema}.{name}")
    if dialect == "sqlite":
        found = await conn.scalar(
            text("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name IN (:a, :b)"),
            {"a": f"{owner}_insert", "b": f"{owner}_update"},
        )
        return bool(found)
    found = await conn.scalar(
        text("SELECT count(*) FROM pg_trigger WHERE tgname = :owner AND tgrelid = to_regclass(:t)"),
        {"owner": owner, "t": _qualified(dialect, table)},
    )
    return bool(found)
