"""A yardstick for the gateway benchmark: `fencegate serve` with the fence taken out.

Run as `python -m fencegate.bench.fenceoff --log-level WARNING serve ...` (the same
arguments as `fencegate`). It is the same process as the product: the same
app, middlewares, storage, durable commit, group commit and audit trail.
Only the fence is gone: no mark is read, compared or written, so every token
is accepted (and the audit entry says it passed). "Fence on >= 0.9x fence
off" then measures everything the fence costs, the mark's row included, not
only the comparison.

The product has no such switch, on purpose: a gateway that can be told to
stop fencing is one configuration mistake away from the bug it exists to
prevent. This module swaps the two stores the gateway builds for subclasses
whose fence step does nothing, in this process only.
"""

from __future__ import annotations

import sqlite3
import sys
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

import gateway.contexts
from fencegate.cli import main
from storage.batch import GroupCommitStore
from storage.errors import StaleTokenError
from storage.protocols import ObjectMeta
from storage.sql import SqlObjectStore
from storage.writer import BatchWriter


class UnfencedStore(SqlObjectStore):
    """One transaction per request, without the fence upsert."""

    async def raise_mark_in(self, conn: AsyncConnection, resource: str, token: int) -> None:
        return None

    async def fenced_put_in(
        self, conn: AsyncConnection, key: str, data: bytes, *, resource: str, token: int
    ) -> ObjectMeta:
        return await self.put_in(conn, key, data, resource=resource, token=token)


class UnfencedWriter(BatchWriter):
    """The group-commit writer, without the fence upsert."""

    def fence(
        self, db: sqlite3.Connection, resource: str, token: int, now: datetime
    ) -> StaleTokenError | None:
        return None


class UnfencedGroupCommitStore(GroupCommitStore):
    writer_type = UnfencedWriter


def unfence() -> None:
    """Make the gateway built in this process use the unfenced stores."""
    gateway.contexts.SqlObjectStore = UnfencedStore  # type: ignore[attr-defined]
    gateway.contexts.GroupCommitStore = UnfencedGroupCommitStore  # type: ignore[attr-defined]


if __name__ == "__main__":
    unfence()
    sys.exit(main())
