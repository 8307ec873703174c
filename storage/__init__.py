"""The fenced object store behind the gateway (SQLite by default, PostgreSQL to scale out).

The names below load on first use, so that a module that needs one constant
(`storage.limits`, read by `fencegate serve --help`) does not load SQLAlchemy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.engine import normalize_url, open_engine
    from storage.errors import (
        BadStorageURL,
        BelowMark,
        BoundElsewhere,
        IdempotencyKeyConflict,
        ObjectNotFound,
        SchemaError,
        StorageError,
        StorageUnavailable,
    )
    from storage.fenced import Policy
    from storage.protocols import Caller, FencedRequest, ObjectData, ObjectMeta, ObjectStore, Refused
    from storage.schema import SCHEMA_VERSION, migrate
    from storage.sql import SqlObjectStore
    from storage.verify import AuditReport, verify_audit

__all__ = [
    "SCHEMA_VERSION",
    "AuditReport",
    "BadStorageURL",
    "BelowMark",
    "BoundElsewhere",
    "Caller",
    "FencedRequest",
    "IdempotencyKeyConflict",
    "ObjectData",
    "ObjectMeta",
    "ObjectNotFound",
    "ObjectStore",
    "Policy",
    "Refused",
    "SchemaError",
    "SqlObjectStore",
    "StorageError",
    "StorageUnavailable",
    "migrate",
    "normalize_url",
    "open_engine",
    "verify_audit",
]

_HOMES = {
    "SCHEMA_VERSION": "storage.schema",
    "AuditReport": "storage.verify",
    "BadStorageURL": "storage.errors",
    "BelowMark": "storage.errors",
    "BoundElsewhere": "storage.errors",
    "Caller": "storage.protocols",
    "FencedRequest": "storage.protocols",
    "IdempotencyKeyConflict": "storage.errors",
    "ObjectData": "storage.protocols",
    "ObjectMeta": "storage.protocols",
    "ObjectNotFound": "storage.errors",
    "ObjectStore": "storage.protocols",
    "Policy": "storage.fenced",
    "Refused": "storage.protocols",
    "SchemaError": "storage.errors",
    "SqlObjectStore": "storage.sql",
    "StorageError": "storage.errors",
    "StorageUnavailable": "storage.errors",
    "migrate": "storage.schema",
    "normalize_url": "storage.engine",
    "open_engine": "storage.engine",
    "verify_audit": "storage.verify",
}


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)
