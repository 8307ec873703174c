"""Which version of an http(s) upstream's key the gateway wrote, by the ETag the upstream gave it.

An http upstream stores bytes and gives each version a strong ETag; it keeps
no token for us. So a write of the conditional http mode
(`gateway/http_transport.py`) is recorded in three steps:

1. `intend`: a row with the key, token, resource and tombstone flag, and no
   ETag yet, committed before the write is sent;
2. the conditional PUT;
3. `record`: its ETag into that row on a 2xx (and the key's older rows of a
   token not above it removed: the new version replaced theirs), or
   `forget` the row when the upstream refused it (412) or was never reached.

A row whose answer never came (a timeout) keeps no ETag. `lookup` finds the
row of an ETag; for an ETag no row names (a write whose answer is not
recorded yet, or never will be, or a write that went around the gateway) it
gives the highest token of any row of the key: every version the gateway
sent was intended first, so no version it wrote carries a higher token.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.errors import map_storage_errors
from storage.models import UpstreamVersion


@dataclass(frozen=True, slots=True)
class Recorded:
    """What the gateway knows of one version at the upstream.

    `exact` is False for an ETag no row names: then `token` is only the
    highest the key's version can carry, and `tombstone` is unknown (False).
    """

    token: int
    resource: str
    tombstone: bool
    exact: bool


async def intend(engine: AsyncEngine, *, key: str, token: int, resource: str, tombstone: bool) -> int:
    """The row of a write about to be sent (no ETag yet); its id."""
    with map_storage_errors("recording an upstream write"):
        async with engine.begin() as conn:
            row = await conn.execute(
                insert(UpstreamVersion)
                .values(key=key, etag=None, token=token, resource=resource, tombstone=tombstone)
                .returning(UpstreamVersion.id)
            )
            return int(row.scalar_one())


async def record(engine: AsyncEngine, row: int, *, key: str, etag: str, token: int) -> None:
    """The upstream accepted write `row` as version `etag`; the key's older rows it outranks go."""
    with map_storage_errors("recording an upstream write"):
        async with engine.begin() as conn:
            await conn.execute(update(UpstreamVersion).where(UpstreamVersion.id == row).values(etag=etag))
            await conn.execute(
                delete(UpstreamVersion).where(
                    UpstreamVersion.key == key, UpstreamVersion.id < row, UpstreamVersion.token <= token
                )
            )


async def forget(engine: AsyncEngine, row: int) -> None:
    """Write `row` was not applied (the upstream refused it, or was never reached)."""
    with map_storage_errors("recording an upstream write"):
        async with engine.begin() as conn:
            await conn.execute(delete(UpstreamVersion).where(UpstreamVersion.id == row))


async def lookup(engine: AsyncEngine, *, key: str, etag: str) -> Recorded | None:
    """The version `etag` of `key` as recorded; the key's bound if no row names it; None if the gateway
    never sent a write to the key."""
    with map_storage_errors("reading the upstream's recorded versions"):
        async with engine.connect() as conn:
            named = (
                await conn.execute(
                    select(UpstreamVersion.token, UpstreamVersion.resource, UpstreamVersion.tombstone)
                    .where(UpstreamVersion.key == key, UpstreamVersion.etag == etag)
                    .order_by(UpstreamVersion.id.desc())
                    .limit(1)
                )
            ).first()
            if named is not None:
                return Recorded(int(named.token), named.resource, bool(named.tombstone), exact=True)
            bound = (
                await conn.execute(
                    select(func.max(UpstreamVersion.token), func.min(UpstreamVersion.resource)).where(
                        UpstreamVersion.key == key
                    )
                )
            ).first()
    if bound is None or bound[0] is None:
        return None
    return Recorded(int(bound[0]), str(bound[1]), False, exact=False)
