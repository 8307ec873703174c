"""The lab's counter as a row in a user's own table on PostgreSQL: `CounterStore` over SQLAlchemy.

The table is what an application would have: one row per counter, keyed by
the lock's resource, holding the value, a `version` the UPDATE bumps (the
store's acceptance order, `seq`, so the checker walks the writes in the
order the table took them) and a token column. Every read and write is its
own short transaction, as with the gateway, so a paused client holds no
transaction open and no row lock that would stall the others.

- `none` (lock-only): a plain SELECT, then a plain UPDATE: nothing checks
  the lease, whatever the holder believes.
- `call`: each transaction calls `lockclient.sql.fence(conn, resource,
  token)` first, then reads or writes: the read raises the mark as the
  gateway's fenced read does, and a write under an older token than the
  mark is refused (`StaleToken`) before anything is written.
- `trigger`: the client calls nothing; it writes its token into the row's
  token column, and the trigger installed on the table
  (`lockclient.sql.install_statements`) refuses a token below the mark
  (SQLSTATE `FG409`) or raises the mark. Reads are plain SELECTs: the
  trigger fences writers, which is all a table can see of a client.

A refusal is a reply, not an error; a driver or network failure is a
`StoreError`, which the workload records as an error (its outcome unknown).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from fencegate.lab.errors import StoreError
from fencegate.lab.protocols import LeaseInfo, StoreReply
from lockclient.errors import StaleToken
from lockclient.sql import STALE_SQLSTATE, fence
from lockclient.tokens.postgres import asyncpg_url

Fencing = Literal["none", "call", "trigger"]
FENCINGS: tuple[Fencing, ...] = ("none", "call", "trigger")
TABLE = "lab_counters"  # the user's table of the lock-only and call rows
TRIGGER_TABLE = "lab_fenced_counters"  # the same table with the trigger installed on its token column
TOKEN_COLUMN = "token"  # noqa: S105 - a column's name, not a secret
RESOURCE_COLUMN = "resource"
TIMEOUT = 10.0  # a statement the lab's PostgreSQL does not answer in this long is an error, not a hang

# The user's table; identifiers are the module's constants, never input.
CREATE = (
    "CREATE TABLE IF NOT EXISTS {table} (resource text PRIMARY KEY, value bigint NOT NULL, "
    "version bigint NOT NULL DEFAULT 0, token bigint)"
)
SEED = "INSERT INTO {table} (resource, value, token) VALUES (:resource, 0, :token)"
READ = "SELECT value FROM {table} WHERE resource = :resource"
WRITE = (
    "UPDATE {table} SET value = :value, version = version + 1 WHERE resource = :resource RETURNING version"
)
WRITE_TOKENED = (
    "UPDATE {table} SET value = :value, version = version + 1, token = :token "
    "WHERE resource = :resource RETURNING version"
)


def open_engine(url: str) -> AsyncEngine:
    """An engine on the lab's PostgreSQL with one connection: one client makes one request at a time."""
    return create_async_engine(
        asyncpg_url(url),
        pool_size=1,
        max_overflow=0,
        connect_args={"timeout": TIMEOUT, "command_timeout": TIMEOUT},
    )


@contextlib.contextmanager
def store_errors(what: str) -> Iterator[None]:
    """A driver or network failure as the lab's `StoreError`: the request's outcome is unknown."""
    try:
        yield
    except (SQLAlchemyError, OSError) as exc:
        raise StoreError(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from exc


async def read_value(conn: AsyncConnection, table: str, resource: str) -> int:
    found = (await conn.execute(text(READ.format(table=table)), {"resource": resource})).scalar()
    if found is None:
        raise StoreError(f"table {table} has no row for {resource!r}: seed it before the clients start")
    return int(found)


class SqlCounter:
    """The shared counter in the user's table, fenced as `fencing` says."""

    def __init__(self, url: str, *, table: str, resource: str, fencing: Fencing) -> None:
        if fencing not in FENCINGS:
            raise StoreError(f"unknown fencing {fencing!r}: use one of {', '.join(FENCINGS)}")
        self._engine = open_engine(url)
        self._table = table
        self._resource = resource
        self._fencing = fencing

    def _token(self, lease: LeaseInfo) -> int:
        if lease.token is None:
            raise StoreError(f"fenced store: lease of {lease.resource} carries no token; draw one first")
        return lease.token

    async def read(self, lease: LeaseInfo) -> StoreReply:
        with store_errors(f"read of {self._resource}"):
            try:
                async with self._engine.begin() as conn:  # a refusal leaves it rolled back
                    if self._fencing == "call":
                        await fence(conn, self._resource, self._token(lease))
                    return StoreReply("ok", value=await read_value(conn, self._table, self._resource))
            except StaleToken as exc:
                return _refused(exc.token, exc.highest)

    async def write(self, value: int, lease: LeaseInfo) -> StoreReply:
        params: dict[str, object] = {"value": value, "resource": self._resource}
        statement = WRITE
        if self._fencing == "trigger":
            params["token"] = self._token(lease)
            statement = WRITE_TOKENED
        with store_errors(f"write of {self._resource}"):
            try:
                async with self._engine.begin() as conn:  # a refusal leaves it rolled back
                    if self._fencing == "call":
                        await fence(conn, self._resource, self._token(lease))
                    version = (await conn.execute(text(statement.format(table=self._table)), params)).scalar()
            except StaleToken as exc:
                return _refused(exc.token, exc.highest)
            except DBAPIError as exc:
                if getattr(exc.orig, "sqlstate", None) != STALE_SQLSTATE:
                    raise
                return StoreReply("refused", detail=f"trigger: {str(exc.orig).splitlines()[0][:200]}")
        if version is None:
            raise StoreError(f"table {self._table} has no row for {self._resource!r}: seed it first")
        return StoreReply("ok", value=value, seq=int(version))

    async def final(self) -> int:
        with store_errors(f"final read of {self._resource}"):
            async with self._engine.connect() as conn:
                return await read_value(conn, self._table, self._resource)

    async def aclose(self) -> None:
        await self._engine.dispose()


def _refused(token: int, highest: int | None) -> StoreReply:
    return StoreReply("refused", detail=f"stale token {token} < {highest}")


def counter(url: str, table: str, resource: str, fencing: Fencing) -> SqlCounter:
    """The factory a client process names (`lab.sql_store:counter`)."""
    return SqlCounter(url, table=table, resource=resource, fencing=fencing)


__all__ = ["FENCINGS", "TABLE", "TRIGGER_TABLE", "Fencing", "SqlCounter", "counter", "open_engine"]
