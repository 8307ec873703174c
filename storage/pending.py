"""Proxy mode's idempotency records: claimed before the store's write, finished after its answer.

On the built-in store a write and its idempotency record commit in one
transaction. In proxy mode the write is the upstream store's, outside the
gateway's transaction, so the record (claimed by the fenced unit, in its
transaction, as everywhere) first stands for a write under way and is
finished once the store answered. `version` says which (proxy mode keeps no
object versions of its own, so the column is free for it):

- NULL (`PENDING`): claimed, the claimant's write to the store is under way.
- `UNKNOWN`: the claimant's write got no answer (timeout, path cut): it may
  have landed or may still land; a retry decides it at the store.
- `APPLIED`: the store holds (or held) the write; a retry answers it.
- `records.GONE_VERSION`: the delete found nothing at the store; a retry
  answers 404.

A request the store refused (a higher token there, another resource, every
conditional send overtaken) changed nothing: its record is released
(deleted), so a retry runs the request afresh and meets the same refusal.

Each change is one statement conditional on the record still being
unfinished, so two replicas finishing one record agree on the first answer.
"""

from __future__ import annotations

from sqlalchemy import and_, delete, select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.elements import ColumnElement

from storage.errors import map_storage_errors
from storage.models import IdempotencyRecord
from storage.protocols import Caller

UNKNOWN = -1
APPLIED = 1


def _record(caller: Caller) -> ColumnElement[bool]:
    assert caller.idempotency_key is not None
    return and_(
        IdempotencyRecord.client == caller.client,
        IdempotencyRecord.idempotency_key == caller.idempotency_key,
    )


def _unfinished() -> ColumnElement[bool]:
    return IdempotencyRecord.version.is_(None) | (IdempotencyRecord.version == UNKNOWN)


async def state(engine: AsyncEngine, caller: Caller) -> tuple[int | None, bool] | None:
    """The record's `version` and `created`; None when there is no record (released, or expired)."""
    query = select(IdempotencyRecord.version, IdempotencyRecord.created).where(_record(caller))
    with map_storage_errors("idempotency lookup"):
        async with engine.connect() as conn:
            row = (await conn.execute(query)).first()
    return None if row is None else (row.version, bool(row.created))


async def finish(engine: AsyncEngine, caller: Caller, *, version: int, created: bool = False) -> None:
    """Record the store's answer, unless another replica already finished the record (its answer
    stands: both saw the same write)."""
    change = update(IdempotencyRecord).where(_record(caller), _unfinished())
    with map_storage_errors("idempotency outcome"):
        async with engine.begin() as conn:
            await conn.execute(change.values(version=version, created=created))


async def unknown(engine: AsyncEngine, caller: Caller) -> None:
    """The claimant got no answer from the store: a retry may decide the outcome at once."""
    change = update(IdempotencyRecord).where(_record(caller), IdempotencyRecord.version.is_(None))
    with map_storage_errors("idempotency outcome"):
        async with engine.begin() as conn:
            await conn.execute(change.values(version=UNKNOWN))


async def release(engine: AsyncEngine, caller: Caller) -> None:
    """The store refused the request: nothing was applied, the key may be sent again."""
    with map_storage_errors("idempotency release"):
        async with engine.begin() as conn:
            await conn.execute(delete(IdempotencyRecord).where(_record(caller), _unfinished()))
