"""The versioned schema: created and migrated by the project, never by hand.

`migrate(engine)` brings the database to `SCHEMA_VERSION`, one numbered step
at a time, each step in the same transaction as the version bump. Several
gateway processes may start at once on one database: on PostgreSQL they
serialize on an advisory lock, on SQLite on the write lock (`BEGIN IMMEDIATE`).
A database newer than this code is refused rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Connection, bindparam, exists, func, insert, inspect, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import aliased

from storage.chain import GENESIS_HEAD, HASHED, Head, entry_hash
from storage.errors import MalformedRow, SchemaError, map_storage_errors
from storage.models import (
    DEFAULT_CONTENT_TYPE,
    AuditEntry,
    AuditHead,
    Base,
    Binding,
    Fence,
    IdempotencyRecord,
    ReplicaClaim,
    SchemaVersion,
    StoredObject,
    UpstreamVersion,
)
from storage.rows import Decoder
from storage.statements import HEAD_ROW

MIGRATION_LOCK = 0x66656E6365  # "fence": the PostgreSQL advisory lock key for migrations
MIGRATION_TIMEOUT = 3600.0  # seconds one command of a migration may take: rewriting a large store is slow
CHAIN_BATCH = 10_000  # audit entries read and stamped per statement when step 4 chains an old trail


def _v1_tables(conn: Connection) -> None:
    tables = Base.metadata.tables
    Base.metadata.create_all(conn, tables=[tables[Fence.__tablename__], tables[StoredObject.__tablename__]])


def _v2_audit_and_idempotency(conn: Connection) -> None:
    tables = Base.metadata.tables
    Base.metadata.create_all(
        conn, tables=[tables[AuditEntry.__tablename__], tables[IdempotencyRecord.__tablename__]]
    )


def _v3_bindings_and_content_type(conn: Connection) -> None:
    """Bind every key the database knows to its resource; objects keep a Content-Type.

    A stored object's key is bound to the resource it was written under. A key
    deleted before this step is bound to the resource of its last accepted
    write or delete in the audit trail, so a delete made before the upgrade
    does not free it either. (Proxy mode's audit entries before this step
    named no key: those keys are bound by their next write.) A fresh database
    got `content_type` from step 1, which creates today's table; an older one
    gets it here.
    """
    Base.metadata.tables[Binding.__tablename__].create(conn)
    written = select(StoredObject.key, StoredObject.resource, StoredObject.updated_at)
    conn.execute(insert(Binding).from_select(["key", "resource", "created_at"], written))
    trail = aliased(AuditEntry)
    last_writes = (
        select(func.max(trail.id))
        .where(trail.outcome == "accepted", trail.method.in_(("PUT", "DELETE")))
        .where(trail.key.is_not(None), trail.resource.is_not(None))
        .group_by(trail.key)
    )
    deleted = select(AuditEntry.key, AuditEntry.resource, AuditEntry.at).where(
        AuditEntry.id.in_(last_writes), ~exists().where(Binding.key == AuditEntry.key)
    )
    conn.execute(insert(Binding).from_select(["key", "resource", "created_at"], deleted))
    columns = {column["name"] for column in inspect(conn).get_columns(StoredObject.__tablename__)}
    if "content_type" not in columns:
        conn.execute(
            text(
                f"ALTER TABLE {StoredObject.__tablename__} ADD COLUMN content_type VARCHAR(255) "
                f"NOT NULL DEFAULT '{DEFAULT_CONTENT_TYPE}'"
            )
        )


def _v4_audit_chain(conn: Connection) -> None:
    """Chain the audit trail: a hash per entry, and the head row every append locks (`chain.py`).

    The entries written before this step are chained here, in id order, from
    the genesis hash: from the upgrade on, a change to any of them shows. (What
    was changed before the upgrade cannot be told; the migration vouches for
    nothing older.) An entry holding what fencegate never writes (`_unchained`)
    stops the migration, which then changes nothing: chained, it would be
    vouched for with a meaning no request gave it. A fresh database got the
    column from step 2, which creates today's table; an older one gets it here.
    """
    columns = {column["name"] for column in inspect(conn).get_columns(AuditEntry.__tablename__)}
    if "chain" not in columns:
        conn.execute(text(f"ALTER TABLE {AuditEntry.__tablename__} ADD COLUMN chain VARCHAR(64)"))
    Base.metadata.tables[AuditHead.__tablename__].create(conn)
    head = GENESIS_HEAD
    entries = Decoder(AuditEntry, HASHED, conn.dialect)
    stamp = (
        update(AuditEntry)
        .where(AuditEntry.id == bindparam("row"))
        .values(chain=bindparam("chain"))
        .execution_options(synchronize_session=False)
    )
    query = select(*entries.stored).order_by(AuditEntry.id).limit(CHAIN_BATCH)
    while True:  # a page at a time, so memory stays bounded however long the trail
        # the first page has no lower bound: an entry numbered below 1 is refused, not left out
        page = conn.execute(query.where(AuditEntry.id > head.last_id) if head.last_id else query).all()
        if not page:
            break
        hashes: list[dict[str, object]] = []
        for raw in page:
            row = _unchained(raw._mapping, entries)
            head = Head(row["id"], entry_hash(head.hash, row))
            hashes.append({"row": row["id"], "chain": head.hash})
        conn.execute(stamp, hashes)
    conn.execute(insert(AuditHead).values(id=HEAD_ROW, last_id=head.last_id, hash=head.hash))


def _unchained(raw: Mapping[Any, Any], decode: Decoder) -> dict[str, Any]:
    """An entry of the trail step 4 chains, decoded; `MalformedRow` with the fix if it was edited."""
    entry: int = raw["id"]
    try:
        if entry < 1:
            raise MalformedRow(f"id {entry} is below 1, where fencegate numbers entries from", column="id")
        return decode(raw)
    except MalformedRow as exc:
        raise MalformedRow(
            f"entry {entry} of the audit trail ({AuditEntry.__tablename__}) is malformed: {exc}; it was "
            f"edited by hand, and step 4 of the migration would chain it and so vouch for it: the migration "
            f"stopped and changed nothing (the store keeps its schema version); correct or remove "
            f"that entry with SQL, or restore the store from a backup, then start again",
            column=exc.column,
        ) from None


def _v5_replica_claims(conn: Connection) -> None:
    """The table where a gateway that must run alone on its database claims that role (proxy mode with
    `--upstream-ordering trust-path`)."""
    Base.metadata.tables[ReplicaClaim.__tablename__].create(conn)


# PostgreSQL vacuums a table once this share of its rows is dead (its default is 0.2): the tables that
# take a row per request, or rewrite a row per request, get back their space while it is still small.
AUTOVACUUM = "autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02"
AUTOVACUUMED = (StoredObject, Fence, IdempotencyRecord, AuditEntry, AuditHead)


def _v6_expiry_index_and_autovacuum(conn: Connection) -> None:
    """Index idempotency records by time, so expiry finds the oldest without a scan; on PostgreSQL,
    vacuum the write-heavy tables early (`AUTOVACUUM`). A fresh database got the index from step 2."""
    for index in Base.metadata.tables[IdempotencyRecord.__tablename__].indexes:
        index.create(conn, checkfirst=True)
    if conn.dialect.name == "postgresql":
        for model in AUTOVACUUMED:
            conn.execute(text(f"ALTER TABLE {model.__tablename__} SET ({AUTOVACUUM})"))


def _v7_upstream_versions(conn: Connection) -> None:
    """The versions written to a conditional http(s) upstream, found by their ETags (`UpstreamVersion`)."""
    Base.metadata.tables[UpstreamVersion.__tablename__].create(conn)


# Step N turns a version N-1 database into version N. Append, never edit.
MIGRATIONS: tuple[Callable[[Connection], None], ...] = (
    _v1_tables,
    _v2_audit_and_idempotency,
    _v3_bindings_and_content_type,
    _v4_audit_chain,
    _v5_replica_claims,
    _v6_expiry_index_and_autovacuum,
    _v7_upstream_versions,
)
SCHEMA_VERSION = len(MIGRATIONS)


def _migrate(conn: Connection) -> int:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
    Base.metadata.tables[SchemaVersion.__tablename__].create(conn, checkfirst=True)
    current = _stored_version(conn)
    ours = set(Base.metadata.tables) - {SchemaVersion.__tablename__}
    if current == 0 and (found := sorted(ours & set(inspect(conn).get_table_names()))):
        raise SchemaError(  # creating the rest beside them would guess at what they hold
            f"the database has tables named as fencegate's ({', '.join(found)}) but no schema version: "
            "they are not fencegate's, or fencegate_schema was lost; restore it with the rest of the "
            "backup, or give fencegate a database of its own"
        )
    _refuse_newer(current)
    for version in range(current + 1, SCHEMA_VERSION + 1):
        MIGRATIONS[version - 1](conn)
    if current == 0:
        conn.execute(insert(SchemaVersion).values(id=1, version=SCHEMA_VERSION))
    elif current < SCHEMA_VERSION:
        conn.execute(update(SchemaVersion).where(SchemaVersion.id == 1).values(version=SCHEMA_VERSION))
    return SCHEMA_VERSION


def _refuse_newer(version: int) -> None:
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"the database is at schema version {version}, this fencegate knows up to "
            f"{SCHEMA_VERSION}: upgrade fencegate instead of pointing an older one at it"
        )


def _stored_version(conn: Connection) -> int:
    """The version stored; `MalformedRow` if the row holds what no migration writes (it was edited)."""
    if not inspect(conn).has_table(SchemaVersion.__tablename__):
        return 0
    stored = Decoder(SchemaVersion, ("version",), conn.dialect)
    found = conn.execute(select(*stored.stored).where(SchemaVersion.id == 1)).first()
    if found is None:
        return 0
    version: int = stored(found._mapping)["version"]
    if version < 1:  # migrating from it would run steps that do not exist, or the last one first
        raise MalformedRow(f"version holds {version}, not a schema version", column="version")
    return version


async def require_current(engine: AsyncEngine) -> None:
    """Raise `SchemaError` with the fix unless the database is at `SCHEMA_VERSION`; changes nothing.

    For readers that must not migrate (`audit verify` reads a store offline, maybe a copy).
    """
    with map_storage_errors("schema check"):
        async with engine.connect() as conn:
            version = await conn.run_sync(_stored_version)
    if version < SCHEMA_VERSION:
        raise SchemaError(
            f"the database is at schema version {version}, this fencegate reads version {SCHEMA_VERSION}: "
            "start a gateway of this version on it once (it migrates the store at start-up), then run "
            "this again"
        )
    _refuse_newer(version)


async def migrate(engine: AsyncEngine) -> int:
    """Bring the schema to `SCHEMA_VERSION`; returns the version now stored."""
    with map_storage_errors("schema migration"):
        async with engine.begin() as conn:
            return await conn.run_sync(_migrate)
