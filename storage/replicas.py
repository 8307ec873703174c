"""Claims on a role only one gateway per database may hold, renewed by a heartbeat.

The claim is one conditional statement: insert the slot's row, or take over
the row already there only if it ran out (`expires_at` before the
database's now), returning the instance that holds it afterwards. Two
gateways claiming at once cannot both win: on PostgreSQL the second insert
waits for the first's row and then finds it fresh, on SQLite the write lock
(`BEGIN IMMEDIATE`) puts one statement after the other. Never read, then
write: that would let both see an empty table.

A heartbeat moves `beat_at` and `expires_at` on, and only in the row this
instance still holds: no row changed means another instance took the slot
over (this one's beats stopped reaching the database for longer than its
window), and the claim is lost for good. A clean stop deletes the row, so
the next gateway starts at once; a crashed one's row blocks a claimant only
until it runs out. Every time is the database's clock, in seconds since the
epoch, so the replicas' own clocks need not agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Float, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from storage.errors import map_storage_errors
from storage.models import ReplicaClaim


class _DatabaseNow(FunctionElement[float]):
    """The database's clock in seconds since the epoch (fractions included), fixed for one statement."""

    type = Float()
    inherit_cache = True


@compiles(_DatabaseNow, "postgresql")
def _postgres_now(element: _DatabaseNow, compiler: Any, **kw: Any) -> str:
    # statement_timestamp(), not now(): now() is the transaction's start, which a claim that waited
    # on the winner's row lock would place before the winner's own heartbeat.
    return "CAST(EXTRACT(EPOCH FROM statement_timestamp()) AS DOUBLE PRECISION)"


@compiles(_DatabaseNow, "sqlite")
def _sqlite_now(element: _DatabaseNow, compiler: Any, **kw: Any) -> str:
    return "((julianday('now') - 2440587.5) * 86400.0)"  # the Julian day of 1970-01-01 00:00 UTC


def database_now() -> ColumnElement[float]:
    return _DatabaseNow()


@dataclass(frozen=True)
class Holder:
    """Who holds a slot, as a refused claimant reports it."""

    instance: str
    holder: str
    beat_ago: float  # seconds since its last heartbeat, by the database's clock
    expires_in: float  # seconds until its claim runs out unless it beats again


async def claim(
    engine: AsyncEngine, *, slot: str, instance: str, holder: str, window: float
) -> Holder | None:
    """Take `slot` for `instance` for `window` seconds: None if taken, else who holds it (fresh)."""
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    now = database_now()
    fresh = dialect.insert(ReplicaClaim).values(
        slot=slot, instance=instance, holder=holder, started_at=now, beat_at=now, expires_at=now + window
    )
    taken = fresh.on_conflict_do_update(
        index_elements=[ReplicaClaim.slot],
        set_={
            name: fresh.excluded[name]
            for name in ("instance", "holder", "started_at", "beat_at", "expires_at")
        },
        where=ReplicaClaim.expires_at < fresh.excluded.beat_at,
    ).returning(ReplicaClaim.instance)
    with map_storage_errors("replica claim"):
        async with engine.begin() as conn:
            if (await conn.execute(taken)).first() is not None:
                return None
            # Refused: who holds it, for the message only (the decision was the statement's). The
            # refused upsert locked that row (PostgreSQL) or holds the write lock (SQLite) until the
            # commit, so its holder cannot delete it in between.
            found = (
                await conn.execute(
                    select(
                        ReplicaClaim.instance,
                        ReplicaClaim.holder,
                        now - ReplicaClaim.beat_at,
                        ReplicaClaim.expires_at - now,
                    ).where(ReplicaClaim.slot == slot)
                )
            ).first()
    assert found is not None, "a refused claim found no holder"
    return Holder(instance=found[0], holder=found[1], beat_ago=float(found[2]), expires_in=float(found[3]))


async def beat(engine: AsyncEngine, *, slot: str, instance: str, window: float) -> bool:
    """Renew `instance`'s claim for another `window` seconds; False if it no longer holds `slot`."""
    now = database_now()
    renew = (
        update(ReplicaClaim)
        .where(ReplicaClaim.slot == slot, ReplicaClaim.instance == instance)
        .values(beat_at=now, expires_at=now + window)
        .returning(ReplicaClaim.instance)
    )
    with map_storage_errors("replica heartbeat"):
        async with engine.begin() as conn:
            return (await conn.execute(renew)).first() is not None


async def release(engine: AsyncEngine, *, slot: str, instance: str) -> None:
    """Give up `instance`'s claim on `slot` (nothing if another instance holds it now)."""
    gone = delete(ReplicaClaim).where(ReplicaClaim.slot == slot, ReplicaClaim.instance == instance)
    with map_storage_errors("replica release"):
        async with engine.begin() as conn:
            await conn.execute(gone)
