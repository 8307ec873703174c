"""Bad input is a `ConfigurationError` saying the fix, raised before anything is drawn or sent.

A resource that is not a non-empty `str`, a TTL past `MAX_TTL`, a retry count
that is not an int, a PostgreSQL URL SQLAlchemy cannot parse: each was once
accepted far enough to draw a token, reach the masters, or escape as another
library's error. Real masters, real token files, and listeners that count
the connections a source opened (none may be).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

import lockclient.sync
from lockclient import (
    ConfigurationError,
    EtcdTokens,
    LockLost,
    PostgresTokens,
    RedisIncrTokens,
    Redlock,
    RetryPolicy,
    SQLiteTokens,
    TokenSource,
    ZooKeeperTokens,
    open_token_source,
)
from lockclient.config import MAX_RESOURCE_BYTES, MAX_TTL
from lockclient.tokens.postgres import asyncpg_url
from tests.lockclient.conftest import values
from tests.lockclient.silent import Listener

# an int, bytes, nothing, an empty name: none may draw a token or name a Redis key
BAD_RESOURCES: list[object] = [123, b"x", None, ""]
NOT_A_RESOURCE = "resource must be a non-empty string"
# a name no master or source can hold as given: a lone surrogate has no UTF-8 form (Redis, SQLite,
# ZooKeeper and etcd each encode the name), and past MAX_RESOURCE_BYTES a name is almost surely data
# given by mistake (a 2 MB name took ZooKeeper ~10 s to refuse, after a token was drawn)
UNSENDABLE: dict[str, str] = {
    "lone surrogate": "inv\ud800oice",
    "one byte too long": "r" * (MAX_RESOURCE_BYTES + 1),
    "too long in UTF-8, short in characters": "é" * (MAX_RESOURCE_BYTES // 2 + 1),
}


@pytest.mark.parametrize("bad", BAD_RESOURCES, ids=repr)
async def test_a_resource_that_is_not_a_non_empty_str_is_refused_before_a_token_is_drawn(
    urls: list[str], tmp_path: Path, bad: object
) -> None:
    path = tmp_path / "tokens.db"
    async with Redlock(urls, tokens=SQLiteTokens(path)) as locker:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "acquire": lambda: locker.acquire(bad),  # type: ignore[arg-type]
            "acquire once": lambda: locker.acquire(bad, blocking=False),  # type: ignore[arg-type]
            "lock": lambda: locker.lock(bad).__aenter__(),  # type: ignore[arg-type]
            "acquire_many": lambda: locker.acquire_many([bad]),  # type: ignore[list-item]
            "acquire_many, after a good one": lambda: locker.acquire_many(["a", bad]),  # type: ignore[list-item]
            "lock_many": lambda: locker.lock_many(["a", bad]).__aenter__(),  # type: ignore[list-item]
            "inspect": lambda: locker.inspect(bad),  # type: ignore[arg-type]
            "force_unlock": lambda: locker.force_unlock(bad, confirm=True),  # type: ignore[arg-type]
        }
        for name, call in calls.items():
            with pytest.raises(ConfigurationError, match=NOT_A_RESOURCE):
                await call()
            assert not path.exists(), f"{name} drew a token for {bad!r}"  # the source never opened its file
        with pytest.raises(
            ConfigurationError, match=NOT_A_RESOURCE
        ):  # when decorating, not at the first call
            locker.locked(bad)  # type: ignore[arg-type]


def test_the_sync_facade_refuses_such_a_resource_before_a_token_is_drawn(
    urls: list[str], tmp_path: Path
) -> None:
    path = tmp_path / "tokens.db"
    with lockclient.sync.Redlock(urls, tokens=SQLiteTokens(path)) as locker:
        for bad in BAD_RESOURCES:
            with pytest.raises(ConfigurationError, match=NOT_A_RESOURCE):
                locker.acquire(bad)  # type: ignore[arg-type]
            with pytest.raises(ConfigurationError, match=NOT_A_RESOURCE), locker.lock(bad):  # type: ignore[arg-type]
                pytest.fail("granted")
    assert not path.exists()


Build = Callable[[int, Path], TokenSource]
# each source aimed at a listener that never answers: a draw that got as far as connecting would wait
# out the source's timeout there, and the listener would count the connection
SOURCES: dict[str, Build] = {
    "sqlite": lambda port, tmp: SQLiteTokens(tmp / "tokens.db"),
    "postgres": lambda port, tmp: PostgresTokens(f"postgresql://postgres@127.0.0.1:{port}/none", timeout=1.0),
    "zookeeper": lambda port, tmp: ZooKeeperTokens(f"127.0.0.1:{port}", timeout=1.0, connect_timeout=1.0),
    "etcd": lambda port, tmp: EtcdTokens(f"127.0.0.1:{port}", timeout=1.0, request_timeout=0.5),
    "redis-incr": lambda port, tmp: RedisIncrTokens(f"redis://127.0.0.1:{port}", unsafe=True, timeout=1.0),
}


@pytest.fixture
async def silent_port() -> AsyncIterator[tuple[int, Listener]]:
    listener = Listener()
    server = await asyncio.start_server(listener.serve, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1], listener


@pytest.mark.parametrize("kind", sorted(SOURCES))
async def test_every_token_source_refuses_such_a_resource_before_it_connects(
    kind: str, silent_port: tuple[int, Listener], tmp_path: Path
) -> None:
    port, listener = silent_port
    source = SOURCES[kind](port, tmp_path)
    refused = [(bad, NOT_A_RESOURCE) for bad in BAD_RESOURCES] + [
        (bad, "resource must") for bad in UNSENDABLE.values()
    ]
    try:
        for bad, reason in refused:
            with pytest.raises(ConfigurationError, match=reason):
                await source.next_token(bad)  # type: ignore[arg-type]
            with pytest.raises(ConfigurationError, match=reason):
                await source.upper_bound(bad)  # type: ignore[arg-type]
    finally:
        await source.aclose()
    assert listener.accepted == 0  # nothing was sent
    assert not (tmp_path / "tokens.db").exists()


POSTGRES_FORM = r"write it as postgresql://user\[:password\]@host\[:port\]/database"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://", POSTGRES_FORM),  # SQLAlchemy's ArgumentError escaped
        ("postgres://", POSTGRES_FORM),
        ("postgresql://u@h:port/db", POSTGRES_FORM),  # a ValueError from SQLAlchemy's port parsing
        ("postgresql://[::1/db", "cannot be parsed.*use one of"),  # a ValueError from urlsplit
    ],
)
def test_a_token_url_that_cannot_be_parsed_says_the_form(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_token_source(url)


def test_a_url_that_is_not_postgresql_is_refused_without_echoing_its_password() -> None:
    with pytest.raises(ConfigurationError, match=POSTGRES_FORM) as refused:
        PostgresTokens("mysql://fg:s3cret-word@db.example/fg")
    assert "s3cret-word" not in str(refused.value)


def test_the_unix_socket_form_of_a_postgresql_url_keeps_its_empty_host() -> None:
    assert (
        asyncpg_url("postgresql:///fg?host=/run/postgresql")
        == "postgresql+asyncpg:///fg?host=/run/postgresql"
    )


@pytest.mark.parametrize("attempts", [1.5, True, False, "3"], ids=repr)
def test_retry_attempts_must_be_an_int(attempts: object) -> None:
    with pytest.raises(ConfigurationError, match=r"RetryPolicy\.attempts must be an int"):
        RetryPolicy(attempts=attempts)  # type: ignore[arg-type]
    assert RetryPolicy(attempts=2).attempts == 2


@pytest.mark.parametrize("ttl", [MAX_TTL * 1.01, 1e16, 1e300])
async def test_a_ttl_past_the_maximum_is_refused_at_once_and_changes_nothing(
    urls: list[str], raw: list[Redis], resource: str, tmp_path: Path, ttl: float
) -> None:
    """Redis answered such a PX with an error on every master: the acquire called it an outage after
    `retry.unreachable` (drawing a token per attempt), and `extend` retried it until the lease was lost
    and released. Neither may reach a master."""
    path = tmp_path / "tokens.db"
    async with Redlock(urls, tokens=SQLiteTokens(path)) as locker:
        with pytest.raises(ConfigurationError, match="maximum"):
            await locker.acquire(resource, ttl=ttl)
        assert not path.exists()  # no token was drawn
        with pytest.raises(ConfigurationError, match="maximum"):
            Redlock(urls, ttl=ttl)
        lease = await locker.acquire(resource, ttl=5.0)
        with pytest.raises(ConfigurationError, match="maximum"):
            await locker.extend(lease, ttl=ttl)
        # the lease is untouched: still held on every master, with its TTL, and usable
        assert not lease.lost
        lease.check()
        assert (lease.extensions, lease.failed_renewals, lease.ttl) == (0, 0, 5.0)
        assert await values(raw, lease.key) == [lease.value.encode()] * len(urls)
        assert all(0 < ttl_ms <= 5000 for ttl_ms in [await client.pttl(lease.key) for client in raw])
        await locker.extend(lease, ttl=6.0)
        await locker.release(lease)
    with pytest.raises(LockLost):
        lease.check()


async def test_the_maximum_ttl_itself_is_taken_by_redis(
    urls: list[str], raw: list[Redis], resource: str
) -> None:
    """MAX_TTL is well inside what Redis takes for PX and PEXPIRE: a lease of a year is granted, extended."""
    async with Redlock(urls) as locker:
        lease = await locker.acquire(resource, ttl=MAX_TTL, blocking=False)
        try:
            await locker.extend(lease, ttl=MAX_TTL)
            assert all(
                ttl_ms > (MAX_TTL - 60) * 1000 for ttl_ms in [await client.pttl(lease.key) for client in raw]
            )
        finally:
            await locker.release(lease)


@pytest.mark.parametrize("name", sorted(UNSENDABLE))
async def test_a_resource_no_master_can_hold_is_refused_before_a_token_is_drawn(
    urls: list[str], raw: list[Redis], tmp_path: Path, name: str
) -> None:
    path = tmp_path / "tokens.db"
    bad = UNSENDABLE[name]
    prefix = f"unsendable-{name.replace(' ', '-')}:"
    async with Redlock(urls, tokens=SQLiteTokens(path), key_prefix=prefix) as locker:
        for call in (
            lambda: locker.acquire(bad),
            lambda: locker.acquire(bad, blocking=False),
            lambda: locker.acquire_many(["a", bad]),
            lambda: locker.inspect(bad),
        ):
            with pytest.raises(ConfigurationError, match="resource must"):
                await call()
    assert not path.exists()  # no token drawn
    for client in raw:
        assert await client.keys(f"{prefix}*") == []  # no key set


async def test_the_longest_resource_name_is_granted(urls: list[str], tmp_path: Path) -> None:
    name = "é" * (MAX_RESOURCE_BYTES // 2)  # exactly MAX_RESOURCE_BYTES in UTF-8
    async with Redlock(urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker:
        lease = await locker.acquire(name, blocking=False)
        assert lease.resource == name
        assert lease.token >= 1
        await locker.release(lease)
