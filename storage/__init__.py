"""The fenced object store behind the gateway (SQLite by default, PostgreSQL to scale out)."""

from storage.engine import normalize_url, open_engine
from storage.errors import ObjectNotFound, SchemaError, StaleTokenError, StorageError, StorageUnavailable
from storage.protocols import ObjectData, ObjectMeta, ObjectStore
from storage.schema import SCHEMA_VERSION, migrate
from storage.sql import SqlObjectStore

__all__ = [
    "SCHEMA_VERSION",
    "ObjectData",
    "ObjectMeta",
    "ObjectNotFound",
    "ObjectStore",
    "SchemaError",
    "SqlObjectStore",
    "StaleTokenError",
    "StorageError",
    "StorageUnavailable",
    "migrate",
    "normalize_url",
    "open_engine",
]
