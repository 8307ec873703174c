"""The two tables: fence marks and objects.

A fence row holds the highest token ever accepted for a resource; it only
goes up (the conditional upsert in `sql.py` is the only writer). An object
row records the token that wrote it, so a reader can see which epoch a value
belongs to.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Integer, LargeBinary, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

MAX_KEY_LENGTH = 512
MAX_RESOURCE_LENGTH = 256


class Base(DeclarativeBase):
    pass


class Fence(Base):
    """The high-water mark of one resource."""

    __tablename__ = "fencegate_fences"

    resource: Mapped[str] = mapped_column(String(MAX_RESOURCE_LENGTH), primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


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
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class SchemaVersion(Base):
    """One row: the schema version the database was migrated to."""

    __tablename__ = "fencegate_schema"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
