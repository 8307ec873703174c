"""The fenced object store on SQLAlchemy: check and change in one transaction.

The fence is one conditional upsert (`statements.py`), `INSERT ... ON CONFLICT
(resource) DO UPDATE SET token = excluded.token WHERE fence.token <=
excluded.token RETURNING token`. No row back means the mark is higher: the transaction rolls
back and nothing changes. On PostgreSQL the upsert locks the fence row until
commit, so two gateways on one database accept a resource's tokens in commit
order (invariant 1); on SQLite the write lock does the same. The mark is never
read, compared and then written. On PostgreSQL a PUT sends the fence upsert as
a CTE of the object upsert: one statement, the same decision and row lock.

A method returns only after its commit returned; any failure on the way is
`StorageUnavailable` (outcome unknown), never a success.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from storage.engine import READ_ONLY
from storage.errors import ObjectNotFound, StaleTokenError, map_storage_errors
from storage.models import Fence, StoredObject
from storage.protocols import ANONYMOUS, Caller, ObjectData, ObjectMeta, Refused
from storage.records import (
    ACCEPTED,
    FENCE_PASSED,
    NOT_FOUND,
    REPLAYED,
    audit_params,
    idempotency_params,
    refused_params,
    replay,
    status_of,
)
from storage.statements import Statements


def _now() -> datetime:
    return datetime.now(UTC)


def digest_of(data: bytes) -> str:
    """The content digest used as the ETag."""
    return hashlib.sha256(data).hexdigest()


def stale_token(resource: str, token: int, highest: int) -> StaleTokenError:
    """The refusal of `token` by the mark `highest`."""
    return StaleTokenError(
        f"token {token} is below the mark {highest} of resource {resource!r}: a newer lease has "
        "written; take the lock again to get a fresh token",
        resource=resource,
        token=token,
        highest=highest,
    )


def object_params(key: str, data: bytes, *, resource: str, token: int, now: datetime) -> dict[str, Any]:
    """The bound parameters of `Statements.object_upsert`."""
    return {
        "key": key,
        "data": data,
        "size": len(data),
        "digest": digest_of(data),
        "token": token,
        "resource": resource,
        "updated_at": now,
    }


def _meta(row: Any, *, created: bool = False) -> ObjectMeta:
    return ObjectMeta(
        key=row.key,
        resource=row.resource,
        token=row.token,
        version=row.version,
        size=row.size,
        digest=row.digest,
        created=created,
    )


class SqlObjectStore:
    """`ObjectStore` over one SQLAlchemy async engine (SQLite or PostgreSQL).

    The engine is owned by the caller (a cleanup context), not by the store.
    """

    def __init__(self, engine: AsyncEngine, *, now: Callable[[], datetime] = _now) -> None:
        self._engine = engine
        self._now = now
        self._sql = Statements.for_dialect(engine.dialect.name)

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    # -- the fence ------------------------------------------------------------

    async def raise_mark_in(self, conn: AsyncConnection, resource: str, token: int) -> None:
        """Raise the mark to `token` if `token` >= mark, in `conn`'s transaction; else StaleTokenError."""
        params = {"resource": resource, "token": token, "updated_at": self._now()}
        if (await conn.execute(self._sql.fence_upsert, params)).first() is not None:
            return
        # Only for the message: the decision was the upsert above.
        highest = (await conn.execute(self._sql.mark_select, {"resource": resource})).scalar_one()
        raise stale_token(resource, token, highest)

    async def _audit_in(
        self,
        conn: AsyncConnection,
        caller: Caller,
        *,
        method: str,
        key: str | None,
        resource: str,
        token: int,
        status: int,
        outcome: str,
    ) -> None:
        mark = token if outcome in FENCE_PASSED else None
        params = audit_params(
            caller,
            method=method,
            key=key,
            resource=resource,
            token=token,
            mark=mark,
            status=status,
            outcome=outcome,
            now=self._now(),
        )
        await conn.execute(self._sql.audit_insert, params)

    async def _replayed_in(self, conn: AsyncConnection, caller: Caller, method: str) -> ObjectMeta | None:
        """The first outcome of this retry (recorded as replayed), or None if this is the first try."""
        if caller.idempotency_key is None:
            return None
        params = {"client": caller.client, "idempotency_key": caller.idempotency_key}
        row = (await conn.execute(self._sql.idempotency_select, params)).first()
        if row is None:
            return None
        meta = replay(caller, dict(row._mapping))
        await self._audit_outcome_in(conn, caller, method, meta, REPLAYED)
        return meta

    async def _audit_outcome_in(
        self, conn: AsyncConnection, caller: Caller, method: str, meta: ObjectMeta, outcome: str
    ) -> None:
        """Audit a request the fence let through (accepted, or a replayed first outcome)."""
        assert meta.token is not None
        await self._audit_in(
            conn,
            caller,
            method=method,
            key=meta.key,
            resource=meta.resource,
            token=meta.token,
            status=status_of(method, meta),
            outcome=outcome,
        )

    async def _accepted_in(
        self, conn: AsyncConnection, caller: Caller, method: str, meta: ObjectMeta
    ) -> None:
        await self._audit_outcome_in(conn, caller, method, meta, ACCEPTED)
        if caller.idempotency_key is not None:
            await conn.execute(
                self._sql.idempotency_insert, idempotency_params(caller, meta, now=self._now())
            )

    async def fence(
        self, resource: str, token: int, *, method: str = "PUT", caller: Caller = ANONYMOUS
    ) -> None:
        """Raise the mark alone and commit, with its audit entry (the upstream proxy forwards after this)."""
        with map_storage_errors("fence check"):
            async with self._engine.begin() as conn:
                await self.raise_mark_in(conn, resource, token)
                await self._audit_in(
                    conn,
                    caller,
                    method=method,
                    key=None,
                    resource=resource,
                    token=token,
                    status=200,
                    outcome=ACCEPTED,
                )

    # -- fenced operations ----------------------------------------------------

    async def put(
        self, key: str, data: bytes, *, resource: str, token: int, caller: Caller = ANONYMOUS
    ) -> ObjectMeta:
        with map_storage_errors("fenced put"):
            async with self._engine.begin() as conn:
                replayed = await self._replayed_in(conn, caller, "PUT")
                if replayed is not None:
                    return replayed
                meta = await self.fenced_put_in(conn, key, data, resource=resource, token=token)
                await self._accepted_in(conn, caller, "PUT", meta)
                return meta

    async def fenced_put_in(
        self, conn: AsyncConnection, key: str, data: bytes, *, resource: str, token: int
    ) -> ObjectMeta:
        """Raise the mark and write the object in `conn`'s open transaction; StaleTokenError if refused.

        On PostgreSQL the two are one statement (the fence upsert as a CTE the write selects from):
        a round trip and a statement's client-side cost fewer, the same decision.
        """
        if self._sql.fenced_object_upsert is None:
            await self.raise_mark_in(conn, resource, token)
            return await self.put_in(conn, key, data, resource=resource, token=token)
        params = object_params(key, data, resource=resource, token=token, now=self._now())
        row = (await conn.execute(self._sql.fenced_object_upsert, params)).first()
        if row is None:
            # Only for the message: the decision was the fence upsert in the statement above.
            highest = (await conn.execute(self._sql.mark_select, {"resource": resource})).scalar_one()
            raise stale_token(resource, token, highest)
        return _meta(row, created=row.version == 1)

    async def put_in(
        self, conn: AsyncConnection, key: str, data: bytes, *, resource: str, token: int
    ) -> ObjectMeta:
        """Write the object inside an open transaction whose fence check passed."""
        params = object_params(key, data, resource=resource, token=token, now=self._now())
        row = (await conn.execute(self._sql.object_upsert, params)).one()
        return _meta(row, created=row.version == 1)

    async def get(
        self, key: str, *, resource: str, token: int | None, caller: Caller = ANONYMOUS
    ) -> ObjectData:
        with map_storage_errors("fenced get" if token is not None else "get"):
            if token is None:
                async with self._engine.execution_options(**{READ_ONLY: True}).begin() as conn:
                    found = await self.find_in(conn, key)
            else:
                # A fenced read raises the mark, and the raised mark is committed
                # before the read is answered, even when the key is absent.
                async with self._engine.begin() as conn:
                    await self.raise_mark_in(conn, resource, token)
                    found = await self.find_in(conn, key)
                    await self._audit_in(
                        conn,
                        caller,
                        method="GET",
                        key=key,
                        resource=resource,
                        token=token,
                        status=200 if found else 404,
                        outcome=ACCEPTED if found else NOT_FOUND,
                    )
        if found is None:
            raise ObjectNotFound(f"no object under key {key!r}", key=key, audited=token is not None)
        return found

    async def find_in(self, conn: AsyncConnection, key: str) -> ObjectData | None:
        """The object under `key` as `conn`'s transaction sees it, or None."""
        row = (await conn.execute(self._sql.object_select, {"key": key})).first()
        return None if row is None else ObjectData(meta=_meta(row), data=row.data)

    async def delete(self, key: str, *, resource: str, token: int, caller: Caller = ANONYMOUS) -> ObjectMeta:
        with map_storage_errors("fenced delete"):
            async with self._engine.begin() as conn:
                replayed = await self._replayed_in(conn, caller, "DELETE")
                if replayed is not None:
                    return replayed
                await self.raise_mark_in(conn, resource, token)
                meta = await self.delete_in(conn, key, resource=resource, token=token)
                if meta is None:
                    await self._audit_in(
                        conn,
                        caller,
                        method="DELETE",
                        key=key,
                        resource=resource,
                        token=token,
                        status=404,
                        outcome=NOT_FOUND,
                    )
                else:
                    await self._accepted_in(conn, caller, "DELETE", meta)
            if meta is None:
                raise ObjectNotFound(f"no object under key {key!r}", key=key, audited=True)
            return meta

    async def delete_in(
        self, conn: AsyncConnection, key: str, *, resource: str, token: int
    ) -> ObjectMeta | None:
        """Delete inside an open transaction whose fence check passed; None if absent."""
        row = (await conn.execute(self._sql.object_delete, {"key": key})).first()
        if row is None:
            return None
        return ObjectMeta(
            key=key, resource=resource, token=token, version=row.version, size=row.size, digest=row.digest
        )

    async def record_refusals(self, entries: Sequence[Refused]) -> None:
        """Append refused requests to the audit trail in one transaction (they changed nothing)."""
        if not entries:
            return
        with map_storage_errors("audit of refusals"):
            async with self._engine.begin() as conn:
                await conn.execute(self._sql.audit_insert, [refused_params(entry) for entry in entries])

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
            stmt = stmt.where(StoredObject.key.startswith(prefix, autoescape=True))
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
