"""Fill a store with SQL, not HTTP: N objects, their bindings and marks, and N audit entries.

The growth benchmark needs a store that already holds millions of rows; sent
through the gateway that would take hours, so the rows are written by the
database itself (`generate_series` on PostgreSQL, a recursive CTE on SQLite)
in big transactions. Each key `fill/NNNNNNNNNN` is its own resource, with a
64-byte object, as a fenced PUT to a new key writes them. The audit entries
carry a placeholder hash and the head row is moved past them, so the gateway
appends after them; such a store is for measuring, its chain does not verify.
They are dated in 2100, so an archive run (`--audit-retention`) never takes
them: it takes only the entries `fill_archivable` adds before them, dated in
2001 and truly chained, in ids the fill left free (`reserve`), one block per
run, each just below the last (ids stay contiguous, as the archive expects).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.chain import GENESIS_HEAD, link
from storage.models import AuditEntry

CHUNK = 500_000  # rows per statement and transaction
BODY_BYTES = 64
PLACEHOLDER = "0" * 64
FUTURE = datetime(2100, 1, 1, tzinfo=UTC)  # the filled audit entries' time: never archived
LONG_AGO = datetime(2001, 1, 1, tzinfo=UTC)  # the archivable entries' time
LINKED_CHUNK = 10_000  # archivable entries hashed and inserted per transaction

_SQLITE = """
WITH RECURSIVE n(i) AS (SELECT :lo UNION ALL SELECT i + 1 FROM n WHERE i < :hi)
INSERT INTO {table} ({columns}) SELECT {values} FROM n
"""
_PG = (
    "INSERT INTO {table} ({columns}) SELECT {values} "
    "FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS n(i)"
)


def _rows(dialect: str) -> dict[str, tuple[str, str]]:
    """Per table, its columns and the SQL of their values for row `i`."""
    if dialect == "postgresql":
        key = "'fill/' || lpad(i::text, 10, '0')"
        body, digest = f"decode(repeat('78', {BODY_BYTES}), 'hex')", "repeat('0', 64)"
    else:
        key = "'fill/' || printf('%010d', i)"
        body, digest = f"zeroblob({BODY_BYTES})", "printf('%064d', 0)"
    return {
        "fencegate_fences": ("resource, token, updated_at", f"{key}, 1, :at"),
        "fencegate_bindings": ("key, resource, created_at", f"{key}, {key}, :at"),
        "fencegate_objects": (
            "key, data, size, digest, version, token, resource, content_type, updated_at",
            f"{key}, {body}, {BODY_BYTES}, {digest}, 1, 1, {key}, 'application/octet-stream', :at",
        ),
        "fencegate_audit": (
            "id, at, client, method, key, resource, token, mark, status, outcome, chain",
            f"CAST(:base AS bigint) + i, :audit_at, 'bench', 'PUT', {key}, {key}, 1, NULL, 201, 'accepted', "
            f"'{PLACEHOLDER}'",
        ),
    }


def _time(dialect: str, at: datetime) -> object:
    """`at` as a parameter of raw SQL: on SQLite the text SQLAlchemy writes there."""
    return at.strftime("%Y-%m-%d %H:%M:%S.%f") if dialect == "sqlite" else at


async def fill(engine: AsyncEngine, count: int, *, reserve: int = 0) -> None:
    """Add `count` keys (object, binding, mark) and `count` audit entries to a migrated, empty store,
    the entries' ids after `reserve` left free."""
    dialect = engine.dialect.name
    at, audit_at = _time(dialect, datetime.now(UTC)), _time(dialect, FUTURE)
    template = _PG if dialect == "postgresql" else _SQLITE
    async with engine.connect() as conn:
        base = (await conn.execute(text("SELECT last_id FROM fencegate_audit_head"))).scalar_one() + reserve
    for table, (columns, values) in _rows(dialect).items():
        for lo in range(1, count + 1, CHUNK):
            hi = min(lo + CHUNK - 1, count)
            statement = text(template.format(table=table, columns=columns, values=values))
            async with engine.begin() as conn:
                params = {"lo": lo, "hi": hi, "at": at, "audit_at": audit_at, "base": base}
                await conn.execute(statement, params)
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE fencegate_audit_head SET last_id = :last, hash = :hash"),
            {"last": base + count, "hash": PLACEHOLDER},
        )


async def fill_expired(engine: AsyncEngine, count: int, *, prefix: str = "old") -> None:
    """Add `count` idempotency records written long ago, their keys starting with `prefix` (a run's
    own: the last run's sweep may not be done): the next expiry sweeps delete them all."""
    dialect = engine.dialect.name
    at = _time(dialect, LONG_AGO)
    template = _PG if dialect == "postgresql" else _SQLITE
    key = f"'{prefix}/' || " + ("lpad(i::text, 10, '0')" if dialect == "postgresql" else "printf('%010d', i)")
    columns = (
        "client, idempotency_key, request_digest, key, resource, token, version, size, digest, created, at"
    )
    values = f"'bench', {key}, '{PLACEHOLDER}', {key}, {key}, 1, 1, 0, '{PLACEHOLDER}', true, :at"
    if dialect == "sqlite":
        values = values.replace("true", "1")
    statement = text(template.format(table="fencegate_idempotency", columns=columns, values=values))
    for lo in range(1, count + 1, CHUNK):
        async with engine.begin() as conn:
            await conn.execute(statement, {"lo": lo, "hi": min(lo + CHUNK - 1, count), "at": at})


def _archivable(n: int) -> dict[str, object]:
    """Entry `n` of the archivable chain: the same every time, so each block hashes as one chain."""
    return {
        "at": LONG_AGO + timedelta(microseconds=n),
        "client": "bench",
        "method": "PUT",
        "key": f"old/{n:010d}",
        "resource": f"old/{n:010d}",
        "token": 1,
        "mark": None,
        "status": 201,
        "outcome": "accepted",
    }


async def fill_archivable(engine: AsyncEngine, first_id: int, count: int) -> None:
    """Add entries `first_id`.. (`count` of them, in ids `fill` left free) of one chain from entry 1,
    written in 2001: blocks added last to first, each just before the one an archive took, are each a
    segment of that chain, as an archive run checks them."""
    head, last = GENESIS_HEAD, first_id + count - 1
    for lo in range(1, last + 1, LINKED_CHUNK):
        rows, head = link(head, [_archivable(n) for n in range(lo, min(lo + LINKED_CHUNK, last + 1))])
        if mine := [row for row in rows if row["id"] >= first_id]:
            async with engine.begin() as conn:
                await conn.execute(insert(AuditEntry), mine)
