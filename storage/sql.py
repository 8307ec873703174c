"""The fenced object store on SQLAlchemy: one transaction per request, SQLite or PostgreSQL.

Each fenced request is the unit of `fenced.py` run on an async connection
(`AsyncTx`), in a transaction of its own, its audit entry chained onto the
trail last (`chain.py`): committed when the unit accepts it
(or answers a fenced read or delete of a missing key, whose raised mark
stands), rolled back when it refuses, and run again when it reports a
concurrent claim (`Retry`). On PostgreSQL the fence upsert locks the
resource's row until commit, so two gateways on one database accept a
resource's tokens in commit order (invariant 1); on SQLite the write lock
(`BEGIN IMMEDIATE`) does the same. The mark is never read, compared and
then written.

A method returns only after its commit returned; any failure on the way is
`StorageUnavailable` (outcome unknown), never a success.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from storage.chain import Head, announce, head_of, link
from storage.engine import READ_ONLY
from storage.errors import ObjectNotFound, StorageError, StorageUnavailable, map_storage_errors
from storage.fenced import FENCED, Policy, Retry, apply, read_object
from storage.models import Fence, StoredObject
from storage.protocols import FencedRequest, ObjectData, ObjectMeta, ObjectStore, Refused
from storage.records import refused_params
from storage.statements import Statements

# A request that lost a race for a claim (a new key's binding, an idempotency record) runs again and
# then meets the winner's committed row; more attempts than this means something else is wrong.
MAX_ATTEMPTS = 3


def _now() -> datetime:
    return datetime.now(UTC)


def _meta(row: Any) -> ObjectMeta:
    return ObjectMeta(
        key=row.key,
        resource=row.resource,
        token=row.token,
        version=row.version,
        size=row.size,
        digest=row.digest,
    )


class AsyncTx:
    """The unit's `Tx` over an open SQLAlchemy async connection."""

    def __init__(self, conn: AsyncConnection, sql: Statements) -> None:
        self._conn = conn
        self._sql = sql
        self.audits: list[Mapping[str, Any]] = []

    async def row(self, statement: str, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
        found = (await self._conn.execute(getattr(self._sql, statement), dict(params))).first()
        return None if found is None else cast(Mapping[str, Any], found._mapping)

    async def audit(self, params: Mapping[str, Any]) -> None:
        self.audits.append(params)  # chained and inserted just before the commit (`append_audits`)


async def append_audits(
    conn: AsyncConnection, sql: Statements, entries: Sequence[Mapping[str, Any]]
) -> tuple[Head, Head] | None:
    """Chain `entries` onto the trail in `conn`'s transaction: lock the head last, insert, move it."""
    if not entries:
        return None
    found = (await conn.execute(sql.head_select)).first()
    before = head_of(None if found is None else found._mapping)
    rows, after = link(before, entries)
    await conn.execute(sql.audit_insert, rows)
    await conn.execute(sql.head_update, {"last_id": after.last_id, "hash": after.hash})
    return before, after


class SqlObjectStore(ObjectStore):
    """`ObjectStore` over one SQLAlchemy async engine (SQLite or PostgreSQL).

    The engine is owned by the caller (a cleanup context), not by the store.
    `policy` is the fenced unit's (`fenced.Policy`): proxy mode keeps no
    objects here.
    """

    def __init__(
        self, engine: AsyncEngine, *, now: Callable[[], datetime] = _now, policy: Policy = FENCED
    ) -> None:
        self._engine = engine
        self._now = now
        self._sql = Statements.for_dialect(engine.dialect.name)
        self.policy = policy

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    async def fenced(self, request: FencedRequest) -> ObjectMeta | ObjectData:
        """Run the fenced unit for `request` in a transaction of its own; raise its refusal."""
        with map_storage_errors(f"fenced {request.method}"):
            for _ in range(MAX_ATTEMPTS):
                try:
                    async with self._engine.begin() as conn:
                        tx = AsyncTx(conn, self._sql)
                        outcome = await apply(tx, request, now=self._now(), policy=self.policy)
                        if isinstance(outcome, StorageError) and not isinstance(outcome, ObjectNotFound):
                            raise outcome  # rolls back: a refusal keeps nothing, a Retry starts over
                        moved = await append_audits(conn, self._sql, tx.audits)
                except Retry:
                    continue
                if moved is not None:
                    announce(*moved)
                if isinstance(outcome, StorageError):
                    raise outcome  # ObjectNotFound, after the commit of its raised mark
                return outcome
        raise StorageUnavailable(
            f"{request.method} {request.key!r} kept conflicting with concurrent requests; retry"
        )

    async def read(self, key: str, *, resource: str) -> ObjectData:
        sql = self._sql.object_select
        with map_storage_errors("get"):
            async with self._engine.execution_options(**{READ_ONLY: True}).begin() as conn:
                row = (await conn.execute(sql, {"key": key})).first()
        return read_object(key, None if row is None else cast(Mapping[str, Any], row._mapping))

    async def record_refusals(self, entries: Sequence[Refused]) -> None:
        """Append refused requests to the audit trail in one transaction (they changed nothing)."""
        if not entries:
            return
        with map_storage_errors("audit of refusals"):
            async with self._engine.begin() as conn:
                moved = await append_audits(conn, self._sql, [refused_params(entry) for entry in entries])
        if moved is not None:
            announce(*moved)

    # -- reads without a token ------------------------------------------------

    async def list(self, prefix: str, *, after: str = "", limit: int = 1000) -> list[ObjectMeta]:
        cols = (
            StoredObject.key,
            StoredObject.resource,
            StoredObject.token,
            StoredObject.version,
            StoredObject.size,
            StoredObject.digest,
        )
        stmt = select(*cols).where(StoredObject.key > after).order_by(StoredObject.key).limit(limit)
        if prefix:
            # LIKE narrows (SQLite's ignores ASCII case); the substring comparison is exact on both engines,
            # so a key scoped to `a/` never lists `A/...`
            stmt = stmt.where(
                StoredObject.key.startswith(prefix, autoescape=True),
                func.substr(StoredObject.key, 1, len(prefix)) == prefix,
            )
        with map_storage_errors("list"):
            async with self._engine.execution_options(**{READ_ONLY: True}).begin() as conn:
                return [_meta(row) for row in await conn.execute(stmt)]

    async def mark(self, resource: str) -> int:
        with map_storage_errors("mark lookup"):
            async with self._engine.execution_options(**{READ_ONLY: True}).begin() as conn:
                found = (await conn.execute(self._sql.mark_select, {"resource": resource})).scalar()
        return int(found or 0)

    async def marks_count(self) -> int:
        with map_storage_errors("marks count"):
            async with self._engine.execution_options(**{READ_ONLY: True}).begin() as conn:
                return int((await conn.execute(select(func.count()).select_from(Fence))).scalar_one())

    async def ping(self) -> None:
        with map_storage_errors("readiness check"):
            async with self._engine.execution_options(**{READ_ONLY: True}).connect() as conn:
                await conn.execute(select(1))
