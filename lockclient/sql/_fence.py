"""`fence()`: the token check inside the caller's own transaction.

The caller opens a transaction on its database, calls `fence(conn, lease)`
before its writes, and commits. The fence raises the resource's mark to the
token in that transaction, or raises `StaleToken` carrying the mark and
changes nothing. The mark's row stays locked until the caller's transaction
ends, so a newer holder's fence waits for it, and an older one, arriving
later, is refused: the caller's writes commit only with the mark they were
checked against. A serialization failure (PostgreSQL's REPEATABLE READ and
SERIALIZABLE when another transaction changed the mark since the snapshot;
SQLite's "database is locked") is the driver's own retryable error, left
as it is: roll back and run the whole transaction again.

What the gateway refuses is refused here before anything is sent, with the
client's own rules (`lockclient.wire`): a token that is not an `int` in
1..2**63-1, a resource that is not a name of the API, and a lease the
client knows is lost (`LockLost`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, overload

from sqlalchemy import Connection, text
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from lockclient.errors import ConfigurationError, StaleToken
from lockclient.gateway_types import check_fenced
from lockclient.protocols import Fenced
from lockclient.sql._marks import MARKS_TABLE, Executor, dialect_of, marks_statements, raise_mark, read_mark
from lockclient.wire import resource_header, token_header

__all__ = ["create_marks", "fence", "fenced"]

log = logging.getLogger(__name__)

MISSING_MARKS = (
    f"the marks table {MARKS_TABLE} does not exist in this database: create it once with "
    "lockclient.sql.create_marks(conn), or `fencegate sql install --marks-only --url URL`"
)


@overload
def fence(conn: Connection | Session, resource: str, token: int, /) -> None: ...
@overload
def fence(conn: Connection | Session, lease: Fenced, /) -> None: ...
@overload
def fence(
    conn: AsyncConnection | AsyncSession, resource: str, token: int, /
) -> Coroutine[Any, Any, None]: ...
@overload
def fence(conn: AsyncConnection | AsyncSession, lease: Fenced, /) -> Coroutine[Any, Any, None]: ...


def fence(
    conn: Connection | Session | AsyncConnection | AsyncSession,
    resource_or_lease: str | Fenced,
    token: int | None = None,
    /,
) -> Coroutine[Any, Any, None] | None:
    """Fence the caller's open transaction on `conn` with `lease` (or `resource` and `token`).

    Sync connections and sessions fence at once; async ones return an awaitable
    (`await fence(aconn, lease)`). The arguments are checked when it is called,
    before anything is sent. Raises `StaleToken` (the mark is above the token;
    nothing changed: roll back), `LockLost`, `ConfigurationError`.
    """
    resource, checked = _arguments(resource_or_lease, token)
    if isinstance(conn, AsyncConnection | AsyncSession):
        return _fence_async(conn, resource, checked)
    if isinstance(conn, Connection | Session):
        _fence(conn, resource, checked)
        return None
    raise ConfigurationError(
        "fence() takes a SQLAlchemy Connection, Session, AsyncConnection or AsyncSession, got "
        f"{type(conn).__name__}: open a transaction (engine.begin()) and pass its connection"
    )


def _arguments(resource_or_lease: str | Fenced, token: int | None) -> tuple[str, int]:
    """The resource and token to send, checked as the gateway client checks them."""
    if token is not None or not hasattr(resource_or_lease, "token"):  # a resource name, checked below
        if token is None:
            raise ConfigurationError(
                f"fence(conn, resource, token) needs the token, got only {resource_or_lease!r}: "
                "or pass the lease, fence(conn, lease)"
            )
        resource: object = resource_or_lease
        given: object = token
    else:
        lease: Fenced = resource_or_lease  # type: ignore[assignment]  # it has a token: a lease
        check_fenced(lease)
        resource, given = lease.resource, lease.token
    checked = int(token_header(given))  # the checks return what they passed, typed
    return resource_header(resource), checked


async def _fence_async(conn: AsyncConnection | AsyncSession, resource: str, token: int) -> None:
    """The same algorithm as the sync form, run on the async connection's own greenlet."""
    await conn.run_sync(_fence, resource, token)


def _fence(executor: Executor, resource: str, token: int) -> None:
    with _marks_exist():
        if raise_mark(executor, resource, token):
            return
        highest = read_mark(executor, resource)
    log.info("fence refused %r: token %d is below the mark %d", resource, token, highest)
    raise StaleToken(
        f"resource {resource!r}: token {token} is below the mark {highest}; nothing was changed: "
        "roll back, this lease is no longer the newest",
        resource=resource,
        token=token,
        highest=highest,
    )


@contextlib.contextmanager
def _marks_exist() -> Iterator[None]:
    """A missing marks table is the user's setup, named as such (`ConfigurationError`)."""
    try:
        yield
    except (ProgrammingError, OperationalError) as exc:
        if MARKS_TABLE in str(exc.orig) and ("does not exist" in str(exc.orig) or "no such" in str(exc.orig)):
            raise ConfigurationError(MISSING_MARKS) from exc
        raise


@contextlib.asynccontextmanager
async def fenced(bind: AsyncEngine | AsyncConnection, lease: Fenced) -> AsyncIterator[AsyncConnection]:
    """`async with fenced(engine, lease) as conn:` a transaction fenced by `lease`, then committed.

    On an `AsyncEngine` (or a connection outside a transaction) it begins a
    transaction, fences it and yields its connection; leaving the block
    commits, an exception rolls back. On a connection already in a transaction
    it joins it: it fences and yields, and the transaction's owner commits.
    """
    if isinstance(bind, AsyncEngine):
        async with bind.begin() as conn:
            await fence(conn, lease)
            yield conn
    elif bind.in_transaction():
        await fence(bind, lease)
        yield bind
    else:
        async with bind.begin():
            await fence(bind, lease)
            yield bind


def create_marks(conn: Connection) -> None:
    """Create the marks table (and its schema-version row) if missing, in `conn`'s transaction.

    Run once per database, at deploy time, like a migration;
    `fencegate sql install` does the same.
    """
    for statement in marks_statements(dialect_of(conn)):
        conn.execute(text(statement))
