"""The fenced object store behind the gateway (SQLite by default, PostgreSQL to scale out)."""

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
