"""The marks table of the user's own database, and the one statement that fences on it.

`fencegate_marks (resource, token)` holds each resource's high-water mark.
The fence is one conditional upsert on the mark's row:

    INSERT INTO fencegate_marks (resource, token) VALUES (:resource, :token)
    ON CONFLICT (resource) DO UPDATE SET token = excluded.token
    WHERE fencegate_marks.token <= excluded.token
    RETURNING token

A row back: the mark is now the token. No row back: the mark is above the
token and nothing changed. PostgreSQL locks the conflicting row whether the
WHERE holds or not, so a second transaction fencing the same resource waits
for the first to end and then re-reads the row (READ COMMITTED), or fails
with a serialization failure (REPEATABLE READ, SERIALIZABLE) if the first
committed a change to it. SQLite runs one writer at a time: the statement
takes the database's write lock and keeps it to the end of the transaction.
Either way the check and the raise are one step, never a read then a write.

The same statement runs inside the trigger (`_trigger.py`); this module is
its one definition for the call. The table is created explicitly
(`create_marks`, or `fencegate sql install`), never by a fence: see
docs/decisions.md.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, Column, Connection, MetaData, Table, Text, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from lockclient.errors import ConfigurationError

__all__ = ["DIALECTS", "MARKS", "MARKS_TABLE", "marks_statements", "raise_mark", "read_mark"]

MARKS_TABLE = "fencegate_marks"
SCHEMA_TABLE = "fencegate_sql_schema"  # (component, version): the objects `fencegate sql` created
SCHEMA_VERSION = 1
DIALECTS = ("postgresql", "sqlite")

MARKS = Table(
    MARKS_TABLE,
    MetaData(),
    Column("resource", Text, primary_key=True),
    Column("token", BigInteger, CheckConstraint("token >= 1"), nullable=False),
)

Executor = Connection | Session


def check_dialect(name: str) -> str:
    """`name` if the fence has statements for it, else `ConfigurationError`."""
    if name not in DIALECTS:
        raise ConfigurationError(
            f"lockclient.sql fences PostgreSQL and SQLite databases, not {name!r}: "
            "put the marks in one of them, or write through the gateway"
        )
    return name


def dialect_of(executor: Executor) -> str:
    bind = executor.get_bind() if isinstance(executor, Session) else executor
    return check_dialect(bind.dialect.name)


def _upsert(dialect: str, resource: str, token: int) -> Any:
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(MARKS).values(resource=resource, token=token)
    return statement.on_conflict_do_update(
        index_elements=[MARKS.c.resource],
        set_={"token": statement.excluded.token},
        where=MARKS.c.token <= statement.excluded.token,
    ).returning(MARKS.c.token)


def raise_mark(executor: Executor, resource: str, token: int) -> bool:
    """Raise `resource`'s mark to `token` in the executor's transaction; False (nothing changed) if the
    mark is above it."""
    return executor.execute(_upsert(dialect_of(executor), resource, token)).first() is not None


def read_mark(executor: Executor, resource: str) -> int:
    """The mark, read after `raise_mark` refused: the row it conflicted on (locked, on PostgreSQL)."""
    found = executor.execute(select(MARKS.c.token).where(MARKS.c.resource == resource)).scalar()
    return 0 if found is None else int(found)


def marks_statements(dialect: str) -> list[str]:
    """The DDL of the marks table and of the schema-version row, idempotent (`IF NOT EXISTS`)."""
    check_dialect(dialect)
    text = "TEXT" if dialect == "sqlite" else "text"
    on_conflict = "ON CONFLICT (component) DO NOTHING"
    return [
        f"CREATE TABLE IF NOT EXISTS {MARKS_TABLE} (resource {text} PRIMARY KEY, "
        "token BIGINT NOT NULL CHECK (token >= 1))",
        f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (component {text} PRIMARY KEY, version INTEGER NOT NULL)",
        f"INSERT INTO {SCHEMA_TABLE} (component, version) "  # noqa: S608 - constants only, no input
        f"VALUES ('marks', {SCHEMA_VERSION}) {on_conflict}",
    ]
