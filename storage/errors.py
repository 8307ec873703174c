"""Every error the storage layer raises; driver errors are translated here.

StorageError
 ├── BelowMark               the resource's mark is above the token; nothing was written
 ├── BoundElsewhere         the key belongs to another resource than the request named; nothing was written
 ├── ObjectNotFound (KeyError) no object under that key (the fence check itself passed)
 ├── IdempotencyKeyConflict      an Idempotency-Key already recorded a different request; nothing changed
 ├── StorageUnavailable        the database failed or did not answer: the outcome is unknown,
 │                             so a caller must never report success (invariant 4)
 ├── SchemaError               the database holds a schema this code cannot use
 ├── MalformedRow              a stored value is of a type or form fencegate never writes (an edited row)
 ├── BadStorageURL (ValueError) the storage URL is malformed or names an engine this code does not support
 └── BadArchive (ValueError)   an audit archive cannot be written, or a file given as one is not a whole one
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy import exc as sa_exc


class StorageError(Exception):
    """Root of every storage error."""


class BelowMark(StorageError):
    """The token is below the resource's high-water mark; nothing was written."""

    def __init__(self, message: str, *, resource: str, token: int, highest: int) -> None:
        super().__init__(message)
        self.resource = resource
        self.token = token
        self.highest = highest


class BoundElsewhere(StorageError):
    """The key belongs to another resource than the one the request named; nothing was written."""

    def __init__(self, message: str, *, key: str, resource: str, bound: str) -> None:
        super().__init__(message)
        self.key = key
        self.resource = resource  # what the request named
        self.bound = bound  # the resource the key belongs to


class ObjectNotFound(StorageError, KeyError):
    """No object is stored under the key."""

    def __init__(self, message: str, *, key: str, audited: bool = False) -> None:
        super().__init__(message)
        self.key = key
        self.audited = audited  # the fence passed and the audit entry committed with the raised mark

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class IdempotencyKeyConflict(StorageError, ValueError):
    """The client's Idempotency-Key already stands for a different request; nothing was written."""

    def __init__(self, message: str, *, idempotency_key: str) -> None:
        super().__init__(message)
        self.idempotency_key = idempotency_key


class StorageUnavailable(StorageError):
    """The database could not be reached or failed mid-transaction; the outcome is unknown."""


class SchemaError(StorageError):
    """The stored schema version is not one this code can migrate from."""


class MalformedRow(StorageError):
    """A stored value fencegate never writes: the row was edited by hand (`storage/rows.py`)."""

    def __init__(self, message: str, *, column: str) -> None:
        super().__init__(message)
        self.column = column


class BadStorageURL(StorageError, ValueError):
    """The storage URL cannot be used; the message gives one that can."""


@contextlib.contextmanager
def map_storage_errors(what: str, *, drivers: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Translate driver failures into `StorageUnavailable`, keeping our own errors as they are.

    SQLAlchemy's errors are translated, and those of a driver used without it
    (`drivers`: asyncpg's, sqlite3's).

    Any failure of the driver, the socket or a deadline leaves the outcome of a
    commit unknown; the caller answers 503 and never 2xx. The message names
    what failed, never the driver's text (it carries SQL, parameters and
    paths): that stays on `__cause__` and goes to the log.
    """
    caught: tuple[type[Exception], ...] = (sa_exc.SQLAlchemyError, OSError, TimeoutError, *drivers)
    try:
        yield
    except StorageError:
        raise
    except caught as exc:
        raise StorageUnavailable(
            f"storage failed during {what}; check that the database is running and reachable, then retry"
        ) from exc


class BadArchive(StorageError, ValueError):
    """An audit archive's target cannot be written (nothing was deleted), or a file is not a whole archive."""
