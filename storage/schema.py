"""The versioned schema: created and migrated by the project, never by hand.

`migrate(engine)` brings the database to `SCHEMA_VERSION`, one numbered step
at a time, each step in the same transaction as the version bump. Several
gateway processes may start at once on one database: on PostgreSQL they
serialize on an advisory lock, on SQLite on the write lock (`BEGIN IMMEDIATE`).
A database newer than this code is refused rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.errors import SchemaError, map_storage_errors
from storage.models import AuditEntry, Base, Fence, IdempotencyRecord, SchemaVersion, StoredObject

MIGRATION_LOCK = 0x66656E6365  # "fence": the PostgreSQL advisory lock key for migrations


def _v1_tables(conn: Connection) -> None:
    tables = Base.metadata.tables
    Base.metadata.create_all(conn, tables=[tables[Fence.__tablename__], tables[StoredObject.__tablename__]])


def _v2_audit_and_idempotency(conn: Connection) -> None:
    tables = Base.metadata.tables
    Base.metadata.create_all(
        conn, tables=[tables[AuditEntry.__tablename__], tables[IdempotencyRecord.__tablename__]]
    )


# Step N turns a version N-1 database into version N. Append, never edit.
MIGRATIONS: tuple[Callable[[Connection], None], ...] = (_v1_tables, _v2_audit_and_idempotency)
SCHEMA_VERSION = len(MIGRATIONS)


def _migrate(conn: Connection) -> int:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
    Base.metadata.tables[SchemaVersion.__tablename__].create(conn, checkfirst=True)
    current = conn.execute(select(SchemaVersion.version).where(SchemaVersion.id == 1)).scalar()
    current = current or 0
    if current > SCHEMA_VERSION:
        raise SchemaError(
            f"the database is at schema version {current}, this fencegate knows up to "
            f"{SCHEMA_VERSION}: upgrade fencegate instead of pointing an older one at it"
        )
    for version in range(current + 1, SCHEMA_VERSION + 1):
        MIGRATIONS[version - 1](conn)
    if current == 0:
        conn.execute(insert(SchemaVersion).values(id=1, version=SCHEMA_VERSION))
    elif current < SCHEMA_VERSION:
        conn.execute(update(SchemaVersion).where(SchemaVersion.id == 1).values(version=SCHEMA_VERSION))
    return SCHEMA_VERSION


async def migrate(engine: AsyncEngine) -> int:
    """Bring the schema to `SCHEMA_VERSION`; returns the version now stored."""
    with map_storage_errors("schema migration"):
        async with engine.begin() as conn:
            return await conn.run_sync(_migrate)
