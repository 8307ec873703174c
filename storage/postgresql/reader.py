"""Plain reads on PostgreSQL: one `SELECT` on a kept asyncpg connection, one round trip.

A read without a token is `Statements.object_select` by primary key, sent
as one `fetchrow` on one of a few connections kept like the writer's lanes
(`connections.Lane`), taken from a queue and put back. No BEGIN or COMMIT: a
single statement outside a transaction is its own snapshot (READ COMMITTED),
taken when it starts, so it sees every transaction committed before it, from
this gateway or another replica, and never a batch that has not committed.
No ping per read either: a connection that broke (PostgreSQL restarted, the
socket died) is dropped, and because a read is idempotent the read runs
once more on a fresh connection; a second failure is `StorageUnavailable`
(503), the driver's text only on `__cause__`. One deadline, `--storage-timeout`,
covers the whole read (the wait for a free connection, a checkout from the
pool, the retry); a read that ran into it is not run again. After `aclose()`
a read is `StorageUnavailable` and opens nothing: a connection it opened
then would stay checked out of a pool being disposed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.errors import StorageUnavailable, map_storage_errors
from storage.fenced import read_object
from storage.postgresql.connections import Lane, PgStatements
from storage.protocols import ObjectData

log = logging.getLogger(__name__)

# Connections the reads share. A read holds one for a round trip, so a few keep a 2-core gateway busy;
# each is a connection of the engine's pool (10, and 10 more on overflow), beside the writer's lanes.
DEFAULT_READERS = 4
# A connection that failed these ways is gone (closed, reset, the server shutting down): worth one retry.
# InternalClientError: the server's news that it ended the connection (pg_terminate_backend, a restart)
# arrived while the connection was idle, and the next statement finds it still waiting for the end.
_BROKEN: tuple[type[Exception], ...] = (
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    OSError,
)
_DRIVER: tuple[type[Exception], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)


class PgReader:
    """Reads objects on `connections` kept connections; `aclose()` drops them."""

    def __init__(self, engine: AsyncEngine, *, timeout: float, connections: int = DEFAULT_READERS) -> None:
        self._timeout = timeout  # seconds a whole read may take (`--storage-timeout`)
        self._sql = PgStatements()
        self._text = self._sql.plain["object_select"]
        self._lanes: asyncio.Queue[Lane] = asyncio.Queue()
        self._all = [Lane(engine) for _ in range(max(1, connections))]
        self._closed = False  # after aclose(): a read opens no connection (none would be closed again)
        for lane in self._all:
            self._lanes.put_nowait(lane)

    async def read(self, key: str) -> ObjectData:
        with map_storage_errors("get", drivers=_DRIVER):
            # one deadline for the whole read: a free connection, a checkout, a retry
            async with asyncio.timeout(self._timeout):
                lane = await self._lanes.get()
                try:
                    row = await self._fetch(lane, key)
                finally:
                    self._lanes.put_nowait(lane)
        return read_object(key, row)

    async def _fetch(self, lane: Lane, key: str) -> Any:
        if self._closed:
            raise StorageUnavailable("the reader is closed (shutting down); retry on another gateway")
        kept = lane.open
        try:
            return await self._fetch_once(lane, key)
        except _BROKEN as exc:
            # a deadline is an OSError too: never run twice; nor reopen what aclose() closed under a read
            if not kept or isinstance(exc, TimeoutError) or self._closed:
                raise
            log.info("a reader connection was broken (%s); reading again on a fresh one", exc)
        return await self._fetch_once(lane, key)

    async def _fetch_once(self, lane: Lane, key: str) -> Any:
        try:
            pg = await lane.connection()
            return await pg.fetchrow(self._text, *self._sql.args("object_select", {"key": key}))
        except BaseException:
            await lane.close(broken=True)  # whatever happened to it, the next read starts on a fresh one
            raise

    async def aclose(self) -> None:
        self._closed = True
        for lane in self._all:
            await lane.close()
