"""The tables: fence marks, key bindings, objects, the audit trail, idempotency records, replica claims,
the versions written to an http(s) upstream.

A fence row holds the highest token ever accepted for a resource; it only
goes up (the conditional upsert of `statements.py` is the only writer). A
binding row says which resource a key belongs to: written with the key's
first accepted write and never removed, not even by a delete, so no request
can reach an object, or recreate its key, through another resource's mark.
An object row records the token that wrote it, so a reader can see which
epoch a value belongs to.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, DateTime, Float, Index, Integer, LargeBinary, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from lockclient.wire import MAX_ETAG_LENGTH as MAX_ETAG_LENGTH  # an upstream ETag longer is refused (502)
from lockclient.wire import MAX_IDEMPOTENCY_KEY_LENGTH as MAX_IDEMPOTENCY_KEY_LENGTH  # the API's limits:
from lockclient.wire import MAX_RESOURCE_LENGTH as MAX_RESOURCE_LENGTH  # the columns hold what it takes

MAX_KEY_LENGTH = 512
MAX_CLIENT_LENGTH = 128  # an API key's name, or a peer address
MAX_CONTENT_TYPE_LENGTH = 255
DEFAULT_CONTENT_TYPE = "application/octet-stream"

# SQLite gives an autoincrement rowid only to an INTEGER PRIMARY KEY; PostgreSQL gets a BIGSERIAL.
_ROW_ID = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    pass


class Fence(Base):
    """The high-water mark of one resource."""

    __tablename__ = "fencegate_fences"

    resource: Mapped[str] = mapped_column(String(MAX_RESOURCE_LENGTH), primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class Binding(Base):
    """The resource a key belongs to, from its first accepted write on, for as long as the database lives."""

    __tablename__ = "fencegate_bindings"

    key: Mapped[str] = mapped_column(String(MAX_KEY_LENGTH), primary_key=True)
    resource: Mapped[str] = mapped_column(String(MAX_RESOURCE_LENGTH), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class StoredObject(Base):
    """One object: its bytes and the token that wrote them."""

    __tablename__ = "fencegate_objects"

    key: Mapped[str] = mapped_column(String(MAX_KEY_LENGTH), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    size: Mapped[int] = mapped_column(BigInteger, nullable=False)
    digest: Mapped[str] = mapped_column(String(64), nullable=False)
    version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    token: Mapped[int] = mapped_column(BigInteger, nullable=False)
    resource: Mapped[str] = mapped_column(String(MAX_RESOURCE_LENGTH), nullable=False)
    content_type: Mapped[str] = mapped_column(
        String(MAX_CONTENT_TYPE_LENGTH), nullable=False, server_default=DEFAULT_CONTENT_TYPE
    )
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class SchemaVersion(Base):
    """One row: the schema version the database was migrated to."""

    __tablename__ = "fencegate_schema"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False)


class AuditEntry(Base):
    """One fenced request, accepted or refused, in the order the database assigned it.

    An accepted fenced request writes its row in the same transaction as its
    change, after the fence upsert that locked the resource's mark, so per
    resource the ids of accepted rows follow commit order (on PostgreSQL the
    fence row lock orders the two replicas' inserts). Refusals changed nothing
    and are written shortly after, in batches; `outcome` is `accepted`,
    `replayed` (an Idempotency-Key retry answered from its first outcome) or
    the refusal's error code. Every row is chained to the one before by
    `chain` (`storage/chain.py`), in id order.
    """

    __tablename__ = "fencegate_audit"

    id: Mapped[int] = mapped_column(_ROW_ID, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    client: Mapped[str] = mapped_column(String(MAX_CLIENT_LENGTH), nullable=False)
    method: Mapped[str] = mapped_column(String(8), nullable=False)
    key: Mapped[str | None] = mapped_column(String(MAX_KEY_LENGTH), nullable=True)
    resource: Mapped[str | None] = mapped_column(String(MAX_RESOURCE_LENGTH), nullable=True)
    token: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    mark: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    status: Mapped[int] = mapped_column(Integer, nullable=False)
    outcome: Mapped[str] = mapped_column(String(64), nullable=False)
    # sha256 of the previous entry's chain and this entry's fields (`storage/chain.py`); NULL only in a
    # row written by something other than fencegate, which `audit verify` reports.
    chain: Mapped[str | None] = mapped_column(String(64), nullable=True)


class AuditHead(Base):
    """One row: the id and hash of the audit chain's last entry, locked by every append."""

    __tablename__ = "fencegate_audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    hash: Mapped[str] = mapped_column(String(64), nullable=False)


class IdempotencyRecord(Base):
    """The first outcome of a write sent with an `Idempotency-Key`, per client: an accepted write, or a
    delete that found no object (`version` 0, `records.GONE_VERSION`; in proxy mode the state of the
    store's write, `storage.pending`).

    Written in the same transaction as the write, so a retry after a lost
    answer finds it exactly when the write committed.
    """

    __tablename__ = "fencegate_idempotency"
    # expiry deletes the oldest records first, a few hundred at a time (`storage/expiry.py`)
    __table_args__ = (Index("fencegate_idempotency_at", "at"),)

    client: Mapped[str] = mapped_column(String(MAX_CLIENT_LENGTH), primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(MAX_IDEMPOTENCY_KEY_LENGTH), primary_key=True)
    request_digest: Mapped[str] = mapped_column(String(64), nullable=False)
    key: Mapped[str] = mapped_column(String(MAX_KEY_LENGTH), nullable=False)
    resource: Mapped[str] = mapped_column(String(MAX_RESOURCE_LENGTH), nullable=False)
    token: Mapped[int] = mapped_column(BigInteger, nullable=False)
    version: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    size: Mapped[int] = mapped_column(BigInteger, nullable=False)
    digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created: Mapped[bool] = mapped_column(Boolean, nullable=False)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class ReplicaClaim(Base):
    """A role only one gateway on this database may hold (`slot`), and the instance holding it.

    Times are seconds since the epoch by the database's clock, so replicas on
    machines whose clocks differ still agree on when a claim ran out. The
    holder renews `beat_at` and `expires_at` on a schedule and deletes its row
    when it stops cleanly; a row past `expires_at` is a crashed holder's, and
    the next claimant takes it over (`storage/replicas.py`).
    """

    __tablename__ = "fencegate_replicas"

    slot: Mapped[str] = mapped_column(String(64), primary_key=True)
    instance: Mapped[str] = mapped_column(String(64), nullable=False)
    holder: Mapped[str] = mapped_column(String(255), nullable=False)  # host and pid, for the operator
    started_at: Mapped[float] = mapped_column(Float, nullable=False)
    beat_at: Mapped[float] = mapped_column(Float, nullable=False)
    expires_at: Mapped[float] = mapped_column(Float, nullable=False)


class UpstreamVersion(Base):
    """A write sent to a conditional http(s) upstream, and the ETag the upstream gave the version it made.

    An http upstream keeps no metadata of ours, so the token, resource and
    tombstone flag of each version the gateway wrote live here, found by the
    version's ETag. `etag` is None from just before the write is sent until
    its answer is recorded (or for good, if no answer came): such a row still
    bounds the token of a version the upstream holds under an ETag not
    recorded (`storage/upstream_versions.py`).
    """

    __tablename__ = "fencegate_upstream_versions"
    __table_args__ = (Index("ix_fencegate_upstream_versions_key_etag", "key", "etag"),)

    id: Mapped[int] = mapped_column(_ROW_ID, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(MAX_KEY_LENGTH), nullable=False)
    etag: Mapped[str | None] = mapped_column(String(MAX_ETAG_LENGTH), nullable=True)
    token: Mapped[int] = mapped_column(BigInteger, nullable=False)
    resource: Mapped[str] = mapped_column(String(MAX_RESOURCE_LENGTH), nullable=False)
    tombstone: Mapped[bool] = mapped_column(Boolean, nullable=False)
