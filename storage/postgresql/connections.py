"""What `group_commit.py` (the writer) and `reader.py` share on PostgreSQL: kept connections, compiled SQL.

A `Lane` is one connection checked out of the engine's pool (so it opens
as every other one does: TLS, timeouts, the refused-login message) and kept
as the raw asyncpg connection under it, with no SQLAlchemy between the two
ends and no ping per use; its owner drops it (`close(broken=True)`, which
aborts it without waiting for a hung server) after any failure, and the
next use checks out a fresh one. `PgStatements` holds `statements.py`'s
statements compiled once for asyncpg, so both ends run the one definition
of each.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from storage.statements import Statements

log = logging.getLogger(__name__)

# The audit chain's statements: a batch appends with `group_commit.APPEND` instead.
_CHAIN = ("audit_insert", "head_select", "head_update")


class PgStatements:
    """Each statement as PostgreSQL text, plain (`plain`) and wrapped to return one row (`text`).

    `fetchmany` returns the rows of every execution in one list, so for the
    writer each statement is wrapped to return exactly one row: the
    statement's own row, or NULLs when it had none. The first column of every
    statement the unit reads is never NULL in a real row, so that tells the
    two apart. `args` orders a statement's parameters as its `$n`.
    """

    def __init__(self) -> None:
        dialect = asyncpg_dialect.dialect()  # type: ignore[no-untyped-call]
        statements = Statements.for_dialect("postgresql")
        self.plain: dict[str, str] = {}
        self.text: dict[str, str] = {}
        self.order: dict[str, tuple[tuple[str, Any], ...]] = {}  # (parameter, its default) in $n order
        for name in Statements.names():
            if name in _CHAIN:
                continue
            compiled = getattr(statements, name).compile(dialect=dialect)
            defaults = compiled.params
            self.order[name] = tuple((p, defaults.get(p)) for p in compiled.positiontup or ())
            # our own compiled statement, its values bound as $n parameters
            self.plain[name] = compiled.string
            self.text[name] = (
                f"WITH r AS ({compiled.string}) SELECT r.* FROM (SELECT 1) AS one LEFT JOIN r ON true"  # noqa: S608
            )

    def args(self, name: str, params: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(params.get(param, default) for param, default in self.order[name])


class Lane:
    """One connection, checked out of the engine's pool and kept; dropped after a failure."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._conn: AsyncConnection | None = None
        self._driver: Any = None  # the asyncpg connection under `_conn` (driver-specific, hence Any)

    @property
    def open(self) -> bool:
        """Whether a connection is held (one checked out before, which may since have broken)."""
        return self._driver is not None

    async def connection(self) -> Any:
        """The asyncpg connection under the pool's, checked out once and kept until `close`."""
        if self._driver is None:
            if self._conn is None:
                self._conn = await self._engine.connect()
            self._driver = (await self._conn.get_raw_connection()).driver_connection
        return self._driver

    async def close(self, *, broken: bool = False) -> None:
        """Give the connection back to the pool, closed. `broken` (after a failure): abort it at once,
        since a graceful close waits for the server's goodbye (SQLAlchemy waits up to 2 s), which a
        hung server never sends, and the requests that failed on it would wait too."""
        driver, self._driver = self._driver, None
        conn, self._conn = self._conn, None
        if broken and driver is not None:
            driver.terminate()  # the socket is closed now; the pool's close below finds it closed
        if conn is None:
            return
        try:
            await conn.invalidate()
            await conn.close()
        except Exception:
            log.debug("closing a kept connection failed", exc_info=True)
