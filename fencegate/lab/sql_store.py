"""The lab's counter as a row in a user's own table on PostgreSQL: `CounterStore` over SQLAlchemy.

The table is what an application would have: one row per counter, keyed by
the lock's resource, holding the value, a `version` the UPDATE bumps (the
store's acceptance order, `seq`, so the checker walks the writes in the
order the table took them) and a token column. Every read and write is its
own short transaction, as with the gateway, so a paused client holds no
transaction open and no row lock that would stall the others.

- `none` (lock-only): a plain SELECT, then a plain UPDATE: nothing checks
  the lease, whatever the holder believes.

A refusal is a reply, not an error; a driver or network failure is a
`StoreError`, which the workload records as an error (its outcome unknown).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Literal

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from fencegate.lab.errors import StoreError
from fencegate.lab.protocols import LeaseInfo, StoreReply
from lockclient.tokens.postgres import asyncpg_url

Fencing = Literal["none"]
FENCINGS: tuple[Fencing, ...] = ("none",)
TABLE = "lab_counters"  # the user's table of the lock-only and call rows
TIMEOUT = 10.0  # a statement the lab's PostgreSQL does not answer in this long is an error, not a hang

# The user's table: identifiers are the module's constants, never input (hence the noqa: S608 below).
CREATE = (
    "CREATE TABLE IF NOT EXISTS {table} (resource text PRIMARY KEY, value bigint NOT NULL, "
    "version bigint NOT NULL DEFAULT 0, token bigint)"
)
SEED = "INSERT INTO {table} (resource, value) VALUES (:resource, 0)"
READ = "SELECT value FROM {table} WHERE resource = :resource"
WRITE = (
    "UPDATE {table} SET value = :value, version = version + 1 WHERE resource = :resource RETURNING version"
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

    async def read(self, lease: LeaseInfo) -> StoreReply:
        with store_errors(f"read of {self._resource}"):
            async with self._engine.begin() as conn:
                return StoreReply("ok", value=await read_value(conn, self._table, self._resource))

    async def write(self, value: int, lease: LeaseInfo) -> StoreReply:
        params = {"value": value, "resource": self._resource}
        with store_errors(f"write of {self._resource}"):
            async with self._engine.begin() as conn:
                version = (await conn.execute(text(WRITE.format(table=self._table)), params)).scalar()
        if version is None:
            raise StoreError(f"table {self._table} has no row for {self._resource!r}: seed it first")
        return StoreReply("ok", value=value, seq=int(version))

    async def final(self) -> int:
        with store_errors(f"final read of {self._resource}"):
            async with self._engine.connect() as conn:
                return await read_value(conn, self._table, self._resource)

    async def aclose(self) -> None:
        await self._engine.dispose()


def counter(url: str, table: str, resource: str, fencing: Fencing) -> SqlCounter:
    """The factory a client process names (`lab.sql_store:counter`)."""
    return SqlCounter(url, table=table, resource=resource, fencing=fencing)


__all__ = ["FENCINGS", "TABLE", "Fencing", "SqlCounter", "counter", "open_engine"]
