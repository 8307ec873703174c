"""The fenced store's statements, built once per dialect with bound parameters.

The fence is `INSERT ... SELECT ... WHERE NOT EXISTS (the key bound to
another resource) ON CONFLICT (resource) DO UPDATE SET token =
excluded.token WHERE fence.token <= excluded.token RETURNING token, (the
key's binding)`: one statement checks the binding, raises the mark and says
whether the key is bound yet. No row back means the key belongs to another
resource or the mark is higher, and the statement changed nothing. The key's
binding and the idempotency record are claimed with `ON CONFLICT DO NOTHING
RETURNING`: no row back means another transaction got there first (on
PostgreSQL the statement waited for it to commit). The fenced unit
(`fenced.py`) names these statements; both drivers (SQLAlchemy's async
connection in `sql.py`, stdlib sqlite3 in `sqlite/batch_writer.py`) run these same
constructs, so each decision has one definition. Audit entries are
inserted with the id and hash `chain.py` gave them, after `head_select`
locked the chain's head, which `head_update` then moves.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import Executable, bindparam, delete, exists, select, update
from sqlalchemy import insert as plain_insert
from sqlalchemy.dialects import postgresql, sqlite

from storage.models import AuditEntry, AuditHead, Binding, Fence, IdempotencyRecord, StoredObject

OBJECT_COLUMNS = (
    "key",
    "data",
    "size",
    "digest",
    "version",
    "token",
    "resource",
    "content_type",
    "updated_at",
)
META_COLUMNS = ("key", "resource", "token", "version", "size", "digest")
AUDIT_COLUMNS = (
    "id",
    "at",
    "client",
    "method",
    "key",
    "resource",
    "token",
    "mark",
    "status",
    "outcome",
    "chain",
)
HEAD_ROW = 1  # the id of the one row of `fencegate_audit_head`
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


def _values(model: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: _param(name, getattr(model, name)) for name in names}


@dataclass(frozen=True, slots=True)
class Statements:
    """Every statement of the fenced store, for one dialect; the unit names them by field."""

    fence_upsert: Executable
    mark_select: Executable
    binding_select: Executable
    binding_insert: Executable
    object_upsert: Executable
    object_delete: Executable
    object_select: Executable
    audit_insert: Executable
    head_select: Executable
    head_update: Executable
    idempotency_select: Executable
    idempotency_insert: Executable

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The statements' names in field order: fence upserts first (a batch runs its steps so)."""
        return _NAMES

    @classmethod
    def for_dialect(cls, dialect: str) -> Statements:
        insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert

        key = _param("key", Binding.key)
        resource = _param("resource", Fence.resource)
        elsewhere = select(Binding.key).where(Binding.key == key, Binding.resource != resource)
        raised = select(resource, _param("token", Fence.token), _param("updated_at", Fence.updated_at))
        guarded = raised.where(~exists(elsewhere))  # no mark moves for a key of another resource
        fence = insert(Fence).from_select(["resource", "token", "updated_at"], guarded)
        fence = fence.on_conflict_do_update(
            index_elements=[Fence.resource],
            set_={"token": fence.excluded.token, "updated_at": fence.excluded.updated_at},
            where=Fence.token <= fence.excluded.token,
        ).returning(
            Fence.token,
            select(Binding.resource).where(Binding.key == key).scalar_subquery().label("bound"),
        )

        written = tuple(name for name in OBJECT_COLUMNS if name != "version")
        obj = insert(StoredObject).values(_values(StoredObject, written) | {"version": 1})
        obj = obj.on_conflict_do_update(
            index_elements=[StoredObject.key],
            set_={name: obj.excluded[name] for name in written if name != "key"}
            | {"version": StoredObject.version + 1},
        ).returning(*(getattr(StoredObject, name) for name in META_COLUMNS))

        return cls(
            fence_upsert=fence,
            mark_select=select(Fence.token).where(Fence.resource == _param("resource", Fence.resource)),
            binding_select=select(Binding.resource).where(Binding.key == _param("key", Binding.key)),
            binding_insert=insert(Binding)
            .values(_values(Binding, ("key", "resource", "created_at")))
            .on_conflict_do_nothing(index_elements=[Binding.key])
            .returning(Binding.resource),
            object_upsert=obj,
            object_delete=delete(StoredObject)
            .where(StoredObject.key == _param("key", StoredObject.key))
            .returning(StoredObject.version, StoredObject.size, StoredObject.digest),
            object_select=select(*(getattr(StoredObject, name) for name in OBJECT_COLUMNS)).where(
                StoredObject.key == _param("key", StoredObject.key)
            ),
            # inline: no implicit RETURNING of the id (a batch inserts its entries with executemany)
            audit_insert=plain_insert(AuditEntry).values(_values(AuditEntry, AUDIT_COLUMNS)).inline(),
            # the audit chain's head, locked last by every transaction that appends entries (`chain.py`)
            head_select=select(AuditHead.last_id, AuditHead.hash)
            .where(AuditHead.id == HEAD_ROW)
            .with_for_update(),
            head_update=update(AuditHead)
            .where(AuditHead.id == HEAD_ROW)
            .values(_values(AuditHead, ("last_id", "hash"))),
            idempotency_select=select(
                *(getattr(IdempotencyRecord, name) for name in IDEMPOTENCY_COLUMNS)
            ).where(
                IdempotencyRecord.client == _param("client", IdempotencyRecord.client),
                IdempotencyRecord.idempotency_key
                == _param("idempotency_key", IdempotencyRecord.idempotency_key),
            ),
            idempotency_insert=insert(IdempotencyRecord)
            .values(_values(IdempotencyRecord, IDEMPOTENCY_COLUMNS))
            .on_conflict_do_nothing(
                index_elements=[IdempotencyRecord.client, IdempotencyRecord.idempotency_key]
            )
            .returning(IdempotencyRecord.client),
        )


_NAMES = tuple(f.name for f in fields(Statements))
