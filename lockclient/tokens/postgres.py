"""Fencing tokens from a PostgreSQL sequence, through SQLAlchemy's async engine (asyncpg).

`nextval` never hands out a value twice and never goes back on one primary,
whatever the transactions around it do. The sequence must have `CACHE 1`:
with a cache, each session pre-allocates a block, and two sessions then hand
out values out of order (session A's 21 after session B's 40). The source
creates the sequence if it is absent, under an advisory lock so two
processes starting at once do not race, and refuses one with a larger cache.

Draws waiting at the same moment share one statement (`Batcher`): it takes
as many values as there are draws, and they are handed out in ascending
order to the draws in arrival order. 16 draws in flight cost about one round
trip each round instead of 16.

TLS: the DSN takes libpq's `sslmode`, `sslrootcert`, `sslcert`, `sslkey` and
friends (`lockclient.postgres_tls`); without `sslmode` it is plaintext, and a
TLS failure is an error that says why, never a plaintext retry.

Caveat: a replica promoted after the primary crashed may not have the last
increments (asynchronous replication), and the sequence would go back. Run
the token database with synchronous replication, or accept that a failover
can reissue tokens (the gateway then reports `token_source_regressed`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from lockclient.errors import ConfigurationError
from lockclient.tokens._base import ClosingSource, check_resource, check_seconds, map_errors, missing_extra
from lockclient.tokens._batch import Batcher

try:
    import asyncpg  # noqa: F401 (SQLAlchemy loads it by name; a missing one is reported here, with its extra)
    from sqlalchemy import TextClause, event, text
    from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
    from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

    from lockclient.postgres_tls import split_tls
except ImportError as exc:
    raise missing_extra("PostgreSQL", "postgresql", exc) from exc

__all__ = ["DEFAULT_SEQUENCE", "PostgresTokens", "asyncpg_url"]

DEFAULT_SEQUENCE = "fencegate_tokens"
DEFAULT_TIMEOUT = 5.0  # seconds for one token, connecting included
MAX_BATCH = 256  # draws that share one statement at most
# pg_advisory_lock key that serialises sequence creation across processes ("fenceseq" as bytes)
CREATE_LOCK = 0x66656E6365736571
SCHEMES = {"postgresql", "postgres", "postgresql+asyncpg"}
IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")
FIX = "check that PostgreSQL is reachable at the DSN and the role may create sequences"
URL_FORM = "postgresql://user[:password]@host[:port]/database"


def asyncpg_url(dsn: str) -> str:
    """`postgresql://...` (or `postgres://`) as SQLAlchemy's `postgresql+asyncpg://...`."""
    try:
        parts = urlsplit(dsn)
    except ValueError as exc:  # e.g. an unclosed [IPv6 address]
        raise ConfigurationError(
            f"the PostgreSQL URL cannot be parsed ({exc}): write it as {URL_FORM}"
        ) from exc
    if parts.scheme not in SCHEMES:  # the scheme only: the rest of a URL may hold a password
        raise ConfigurationError(
            f"a {parts.scheme or 'scheme-less'} URL is not a PostgreSQL URL: write it as {URL_FORM}"
        )
    # the scheme swapped on the text itself: urlunsplit drops the empty host of `postgresql:///db`
    return "postgresql+asyncpg:" + dsn.split(":", 1)[1]


class PostgresTokens(ClosingSource):
    """One `CACHE 1` sequence shared by every resource: tokens are unique and ordered database-wide."""

    def __init__(
        self,
        dsn: str,
        *,
        sequence: str = DEFAULT_SEQUENCE,
        timeout: float = DEFAULT_TIMEOUT,
        pool_size: int = 5,
    ) -> None:
        check_seconds(timeout=timeout)
        if not IDENTIFIER.fullmatch(sequence):
            raise ConfigurationError(
                f"sequence {sequence!r} is not a plain lower-case SQL identifier: use e.g. 'fencegate_tokens'"
            )
        self.sequence = sequence
        self.timeout = timeout
        url, self.tls = split_tls(asyncpg_url(dsn))
        try:
            self._engine: AsyncEngine = create_async_engine(
                url, isolation_level="AUTOCOMMIT", pool_size=pool_size
            )
        except (ArgumentError, ValueError) as exc:  # SQLAlchemy's URL parser: no host, a port not a number
            # (its message never shows the URL, whose password must not reach a log either)
            raise ConfigurationError(
                f"the PostgreSQL URL cannot be used ({exc}): write it as {URL_FORM}"
            ) from exc
        port = self._engine.url.port
        if port is not None and not 0 < port <= 65535:  # asyncpg would fail each connect with OverflowError
            raise ConfigurationError(
                f"the PostgreSQL URL's port {port} is out of range: give one from 1 to 65535 ({URL_FORM})"
            )
        event.listen(self._engine.sync_engine, "do_connect", self.tls.do_connect)
        # the name passed IDENTIFIER above; identifiers cannot be bound parameters.
        # One value per draw of the batch; sorted by `_issue`, whatever order the rows come in.
        self._next = text(f"SELECT nextval('{sequence}') FROM generate_series(1, :n)")  # noqa: S608
        self._bound = text(f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {sequence}")  # noqa: S608
        self._ready = False
        self._ready_lock = asyncio.Lock()
        self._batch = Batcher(self._issue, max_batch=MAX_BATCH)

    async def _ensure_sequence(self) -> None:
        async with self._ready_lock:
            if self._ready:
                return
            async with self._engine.connect() as conn:
                await conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": CREATE_LOCK})
                try:
                    await conn.execute(
                        text(f"CREATE SEQUENCE IF NOT EXISTS {self.sequence} AS bigint CACHE 1")
                    )
                    cache = (
                        await conn.execute(
                            text(
                                "SELECT cache_size FROM pg_sequences "
                                "WHERE schemaname = current_schema() AND sequencename = :name"
                            ),
                            {"name": self.sequence},
                        )
                    ).scalar_one()
                finally:
                    await conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": CREATE_LOCK})
            if cache != 1:
                raise ConfigurationError(
                    f"sequence {self.sequence} has CACHE {cache}: cached sequences hand out values out of "
                    f"order across sessions; run ALTER SEQUENCE {self.sequence} CACHE 1"
                )
            self._ready = True

    async def _once(self, query: TextClause, params: Mapping[str, Any]) -> list[int]:
        async with self._engine.connect() as conn:
            return [int(v) for v in (await conn.execute(query, params)).scalars()]

    async def _fetch(self, doing: str, query: TextClause, params: Mapping[str, Any]) -> list[int]:
        with map_errors("postgres", doing, SQLAlchemyError, OSError, TimeoutError, fix=FIX):
            async with asyncio.timeout(self.timeout):
                await self._ensure_sequence()
                try:
                    return await self._once(query, params)
                except DBAPIError as exc:
                    # A pooled connection the server closed (say, it restarted) is dropped by the
                    # pool: one fresh try, rather than a ping before every token.
                    if not exc.connection_invalidated:
                        raise
                return await self._once(query, params)

    async def _issue(self, resources: Sequence[str]) -> list[int]:
        return sorted(await self._fetch("issue a token", self._next, {"n": len(resources)}))

    async def next_token(self, resource: str) -> int:
        # `timeout` bounds the whole draw: queued behind a statement, and SQLAlchemy closing a connection
        # cancelled at its deadline (gracefully, for up to 2 s more) while the draw waits
        with map_errors("postgres", f"issue a token within {self.timeout:g} s", TimeoutError, fix=FIX):
            async with asyncio.timeout(self.timeout):
                return await self._batch.draw(check_resource(resource))

    async def upper_bound(self, resource: str) -> int:
        """The sequence's last value (0 before the first token): >= every token of every resource."""
        check_resource(resource)
        (bound,) = await self._fetch("read the highest token", self._bound, {})
        return bound

    async def aclose(self) -> None:
        await self._batch.aclose()
        await self._engine.dispose()

    def __repr__(self) -> str:
        url = self._engine.url.render_as_string(hide_password=True)
        return f"PostgresTokens({url!r}, sequence={self.sequence!r}, tls={self.tls.describe()!r})"
