"""The fenced store's statements, built once per dialect with bound parameters.

The fence is `INSERT ... ON CONFLICT (resource) DO UPDATE SET token =
excluded.token WHERE fence.token <= excluded.token RETURNING token`: no row
back means the mark is higher and the statement changed nothing. Both the
async store (`sql.py`) and the SQLite group-commit writer (`writer.py`)
run these same constructs, so the decision has one definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Executable, bindparam, delete, literal, select
from sqlalchemy import insert as plain_insert
from sqlalchemy.dialects import postgresql, sqlite

from storage.models import AuditEntry, Fence, IdempotencyRecord, StoredObject

OBJECT_COLUMNS = ("key", "data", "size", "digest", "version", "token", "resource", "updated_at")
META_COLUMNS = ("key", "resource", "token", "version", "size", "digest")
AUDIT_COLUMNS = ("at", "client", "method", "key", "resource", "token", "mark", "status", "outcome")
IDEMPOTENCY_COLUMNS = (
    "client",
    "idempotency_key",
    "request_digest",
    "key",
    "resource",
    "token",
    "version",
    "size",
    "digest",
    "created",
    "at",
)


def _param(name: str, column: Any) -> Any:
    return bindparam(name, type_=column.type)


@dataclass(frozen=True, slots=True)
class Statements:
    """Every statement of the fenced store, for one dialect."""

    fence_upsert: Executable
    mark_select: Executable
    # PostgreSQL only: the fence upsert as a CTE and the object upsert selecting from it, one round trip.
    fenced_object_upsert: Executable | None
    object_upsert: Executable
    object_delete: Executable
    object_select: Executable
    audit_insert: Executable
    idempotency_select: Executable
    idempotency_insert: Executable

    @classmethod
    def for_dialect(cls, dialect: str) -> Statements:
        insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert

        fence = insert(Fence).values(
            resource=_param("resource", Fence.resource),
            token=_param("token", Fence.token),
            updated_at=_param("updated_at", Fence.updated_at),
        )
        fence = fence.on_conflict_do_update(
            index_elements=[Fence.resource],
            set_={"token": fence.excluded.token, "updated_at": fence.excluded.updated_at},
            where=Fence.token <= fence.excluded.token,
        ).returning(Fence.token)

        columns = {name: getattr(StoredObject, name) for name in OBJECT_COLUMNS}
        written = [name for name in OBJECT_COLUMNS if name != "version"]

        def upsert_object(stmt: Any) -> Any:
            return stmt.on_conflict_do_update(
                index_elements=[StoredObject.key],
                set_={name: stmt.excluded[name] for name in OBJECT_COLUMNS if name not in ("key", "version")}
                | {"version": StoredObject.version + 1},
            ).returning(*(getattr(StoredObject, name) for name in META_COLUMNS))

        obj = upsert_object(
            insert(StoredObject).values(
                {name: _param(name, columns[name]) for name in written} | {"version": 1}
            )
        )
        fenced_obj = None
        if dialect == "postgresql":
            # A data-modifying CTE: no row from the fence upsert (the mark is higher) means no row to
            # write and nothing returned; the fence row stays locked until commit, as on its own.
            passed = fence.cte("fence_passed")
            row = select(
                *(_param(name, columns[name]) for name in written), literal(1, StoredObject.version.type)
            )
            fenced_obj = upsert_object(
                insert(StoredObject).from_select([*written, "version"], row.select_from(passed))
            )

        return cls(
            fence_upsert=fence,
            mark_select=select(Fence.token).where(Fence.resource == _param("resource", Fence.resource)),
            fenced_object_upsert=fenced_obj,
            object_upsert=obj,
            object_delete=delete(StoredObject)
            .where(StoredObject.key == _param("key", StoredObject.key))
            .returning(StoredObject.version, StoredObject.size, StoredObject.digest),
            object_select=select(*(getattr(StoredObject, name) for name in OBJECT_COLUMNS)).where(
                StoredObject.key == _param("key", StoredObject.key)
            ),
            audit_insert=plain_insert(AuditEntry).values(
                {name: _param(name, getattr(AuditEntry, name)) for name in AUDIT_COLUMNS}
            ),
            idempotency_select=select(
                *(getattr(IdempotencyRecord, name) for name in IDEMPOTENCY_COLUMNS)
            ).where(
                IdempotencyRecord.client == _param("client", IdempotencyRecord.client),
                IdempotencyRecord.idempotency_key
                == _param("idempotency_key", IdempotencyRecord.idempotency_key),
            ),
            idempotency_insert=plain_insert(IdempotencyRecord).values(
                {name: _param(name, getattr(IdempotencyRecord, name)) for name in IDEMPOTENCY_COLUMNS}
            ),
        )
