"""Rows and bytes of each of fencegate's tables, for the gateway's metrics (docs/operations.md, sizing).

PostgreSQL: the planner's row estimate (`reltuples`, kept by autovacuum's
analyze; -1 before the first one, reported as 0) and
`pg_total_relation_size` (the table, its indexes and TOAST): two catalog
reads, whatever the tables hold. SQLite keeps no such figures: rows are
counted (a scan of each table's smallest index, on a reader that never
blocks the writer in WAL mode), and bytes are the pages of each table and its
indexes from the `dbstat` table when the SQLite build has it (the stdlib's
usually does), else not reported. The gateway reads them every few minutes,
not per scrape.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from storage.engine import READ_ONLY
from storage.errors import map_storage_errors
from storage.models import AuditEntry, AuditHead, Binding, Fence, IdempotencyRecord, StoredObject

TABLES = tuple(
    model.__tablename__ for model in (StoredObject, Binding, Fence, AuditEntry, AuditHead, IdempotencyRecord)
)
_PG_SIZES = text(
    "SELECT relname, greatest(reltuples, 0)::bigint AS rows, pg_total_relation_size(oid) AS bytes "
    "FROM pg_class WHERE relkind = 'r' AND relnamespace = current_schema()::regnamespace "
    "AND relname IN :names"
).bindparams(bindparam("names", expanding=True))
_SQLITE_BYTES = text(
    "SELECT m.tbl_name AS name, sum(s.pgsize) AS bytes FROM dbstat s JOIN sqlite_master m ON m.name = s.name "
    "GROUP BY m.tbl_name"
)


@dataclass(frozen=True, slots=True)
class TableSize:
    """One table: its rows (an estimate on PostgreSQL) and its bytes on disk, indexes included."""

    table: str
    rows: int
    bytes: int | None


async def table_sizes(engine: AsyncEngine) -> list[TableSize]:
    """The size of each of fencegate's tables; `StorageError` if the database fails."""
    with map_storage_errors("table sizes"):
        if engine.dialect.name == "postgresql":
            async with engine.connect() as conn:
                found = (await conn.execute(_PG_SIZES, {"names": list(TABLES)})).all()
            return [TableSize(row.relname, int(row.rows), int(row.bytes)) for row in found]
        async with engine.execution_options(**{READ_ONLY: True}).connect() as conn:
            rows = {table: await _count(conn, table) for table in TABLES}
            sizes = await _sqlite_bytes(conn)
        return [TableSize(table, rows[table], sizes.get(table)) for table in TABLES]


async def _count(conn: AsyncConnection, table: str) -> int:
    count = select(func.count()).select_from(text(table))
    return int((await conn.execute(count)).scalar_one())


async def _sqlite_bytes(conn: AsyncConnection) -> dict[str, int]:
    try:
        found = (await conn.execute(_SQLITE_BYTES)).all()
    except OperationalError:  # a build without the dbstat table
        return {}
    return {str(row.name): int(row.bytes) for row in found}
