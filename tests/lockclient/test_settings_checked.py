"""A setting or option of the wrong kind is a `ConfigurationError` saying the fix, before anything runs.

Each of these was accepted and then misbehaved: one Redis server listed
twice (under another database, scheme or login) voted twice, so it alone
made a quorum; `drift_factor=1.5` refused every acquire after drawing its
token; `max_extensions=nan` let a lease be extended forever; `retry=None` and
`key_prefix=None` failed mid-acquire, after a token was drawn; `ttl=True`
was a one-second lease, `blocking="no"` blocked, and strings where numbers
belong escaped as a plain `TypeError`. Real masters and a real token file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import ConfigurationError, Lease, LockNotAcquired, Redlock, RetryPolicy, SQLiteTokens
from lockclient.config import check_masters, check_tokens

Factory = Callable[[ClusterSpec], LocalCluster]
DISTINCT = [
    ["redis://h:1", "redis://h:2", "redis://g:1"],
    ["unix:///run/a.sock", "unix:///run/b.sock", "redis://localhost:6379"],
    ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://[::2]:6379"],
    ["redis://[fe80::1%eth0]:1", "redis://[fe80::1%eth1]:1", "redis://[fe80::1]:1"],  # other links
]


def aliases(url: str) -> dict[str, str]:
    """Other spellings of the master at `url` (`redis://127.0.0.1:PORT`): each reaches the same server."""
    port = url.rpartition(":")[2]
    return {
        "another db": f"{url}/1",
        "a db in the query": f"{url}?db=2",
        "a trailing slash": f"{url}/",
        "a login": f"redis://user:secret@127.0.0.1:{port}/3",
        "TLS": f"rediss://127.0.0.1:{port}",
        "localhost": f"redis://LocalHost:{port}",
        "IPv4 in IPv6": f"redis://[::ffff:127.0.0.1]:{port}",
    }


@pytest.mark.parametrize(
    "alias",
    ["another db", "a db in the query", "a trailing slash", "a login", "TLS", "localhost", "IPv4 in IPv6"],
)
def test_one_server_listed_twice_is_refused_whatever_its_url_says(urls: list[str], alias: str) -> None:
    first, second = urls[:2]
    with pytest.raises(ConfigurationError) as caught:
        Redlock([first, second, aliases(first)[alias]])
    message = str(caught.value)
    assert "masters[0] and masters[2] name the same Redis server" in message
    assert "list each server once" in message
    assert "secret" not in message


@pytest.mark.parametrize(
    ("masters", "server"),
    [
        (["redis://h", "redis://h:6379/1"], "h:6379"),  # the default port
        (["redis://H.example.com:1", "redis://h.example.com.:1"], "h.example.com:1"),  # case, root dot
        (["redis://[::1]:7", "redis://[0:0::1]:7"], r"\[::1\]:7"),  # one address, two spellings
        (["redis://[fe80::1%eth0]:7", "redis://[FE80:0::1%eth0]:7"], r"\[fe80::1%eth0\]:7"),
        (["unix:///run/redis.sock", "unix:///run//redis.sock?db=1"], "unix socket /run/redis.sock"),
    ],
)
def test_spellings_of_one_address_are_one_server(masters: list[str], server: str) -> None:
    with pytest.raises(ConfigurationError, match=f"masters\\[0\\] and masters\\[1\\] name .*\\({server}\\)"):
        check_masters(masters)
    for distinct in DISTINCT:  # and only those: another port, host or socket is another server
        check_masters(distinct)


def test_a_master_that_is_not_a_str_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"masters\[1\] must be a Redis URL as a str, got bytes"):
        Redlock(["redis://h:1", b"redis://h:2"])  # type: ignore[list-item]


async def acquire_once(masters: list[str]) -> Lease[None]:
    async with Redlock(masters, ttl=5.0, retry=RetryPolicy(unreachable=0)) as locker:
        return await locker.acquire("alias", blocking=False)


@pytest.mark.parametrize("alias", ["another db", "a db in the query"])  # each was granted
async def test_a_killed_master_is_not_outvoted_by_its_alias(cluster_factory: Factory, alias: str) -> None:
    """Two servers, one listed twice: with the other killed, the survivor alone must not be a quorum."""
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=2))
    a, b = cluster.redis_urls
    await asyncio.to_thread(cluster.kill, "redis-1")  # b is down: one server is left
    # refused when built, or at least not granted: never a lease from one server's two votes
    with pytest.raises((ConfigurationError, LockNotAcquired)):
        await acquire_once([a, aliases(a)[alias], b])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ttl": "10"}, "ttl must be a finite number > 0, got '10'"),
        ({"ttl": True}, "ttl must be a finite number > 0, got True"),
        ({"node_timeout": "x"}, "node_timeout must be a finite number > 0, got 'x'"),
        ({"drift_factor": 1.5}, "drift_factor must be a number >= 0 and < 1"),
        ({"drift_factor": 1}, "1 or more leaves no validity"),
        ({"drift_factor": "0.01"}, "drift_factor must be"),
        ({"max_extensions": float("nan")}, "max_extensions must be an int >= 0, got nan"),
        ({"max_extensions": 2.5}, "max_extensions must be an int >= 0"),
        ({"max_extensions": "3"}, "max_extensions must be an int >= 0"),
        ({"max_extensions": True}, "max_extensions must be an int >= 0"),
        ({"max_extensions": None}, "auto_extend=True"),
        ({"watchdog_fraction": "x"}, "watchdog_fraction must be a number in \\(0, 1\\)"),
        ({"retry": None}, "retry must be a RetryPolicy, got None"),
        ({"retry": 3}, "RetryPolicy\\(attempts=1\\)"),
        ({"key_prefix": None}, "key_prefix must be a str, got None"),
        ({"key_prefix": b"app:"}, "key_prefix must be a str"),
        ({"key_prefix": "app\ud800:"}, "key_prefix must be valid Unicode"),
        ({"reentrant": "yes"}, "reentrant must be True or False"),
    ],
)
def test_a_setting_of_the_wrong_kind_is_refused_when_built(
    urls: list[str], tmp_path: Path, settings: dict[str, object], message: str
) -> None:
    path = tmp_path / "tokens.db"
    with pytest.raises(ConfigurationError, match=message):
        Redlock(urls, tokens=SQLiteTokens(path), **settings)  # type: ignore[call-overload]
    assert not path.exists()  # nothing drawn


async def test_a_drift_factor_below_one_grants_and_one_is_refused(urls: list[str], resource: str) -> None:
    """validity = ttl - elapsed - (ttl * drift_factor + 2 ms): below 1 some is left, at 1 none ever is."""
    for factor in (0, 0.01, 0.5):
        async with Redlock(urls, drift_factor=factor) as locker:
            await locker.release(await locker.acquire(resource, blocking=False))
    with pytest.raises(ConfigurationError, match=r"drift_factor must be a number >= 0 and < 1, got 1\.0"):
        Redlock(urls, drift_factor=1.0)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"delay": "0.1"}, "RetryPolicy.delay must be a finite number >= 0"),
        ({"jitter": True}, "RetryPolicy.jitter"),
        ({"unreachable": None}, "RetryPolicy.unreachable"),
        ({"poll": "1"}, "RetryPolicy.poll must be a finite number > 0"),
    ],
)
def test_a_retry_policy_of_the_wrong_kind_is_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RetryPolicy(**settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ttl": "5"}, "ttl must be a finite number > 0, got '5'"),
        ({"ttl": True}, "ttl must be a finite number > 0, got True"),
        ({"timeout": "1"}, "timeout must be a number of seconds >= 0 or None, got '1'"),
        ({"timeout": float("nan")}, "timeout must be"),
        ({"timeout": True}, "timeout must be"),
        ({"blocking": "no", "timeout": 0.5}, "blocking must be True or False, got 'no'"),
        ({"blocking": 0}, "blocking must be True or False"),
        ({"auto_extend": "yes", "blocking": False}, "auto_extend must be True or False"),
        ({"on_lost": 5, "blocking": False}, "on_lost must be a function of the lost lease, or None"),
    ],
)
async def test_an_acquire_option_of_the_wrong_kind_is_refused_before_a_token_is_drawn(
    urls: list[str], raw: list[Redis], tmp_path: Path, resource: str, options: dict[str, object], message: str
) -> None:
    path = tmp_path / "tokens.db"
    async with Redlock(urls, tokens=SQLiteTokens(path)) as locker:
        for call in (
            lambda: locker.acquire(resource, **options),  # type: ignore[arg-type]
            lambda: locker.acquire_many([resource], **options),  # type: ignore[arg-type]
        ):
            with pytest.raises(ConfigurationError, match=message):
                await call()
        with pytest.raises(ConfigurationError, match=message):
            locker.locked(resource, **options)  # type: ignore[arg-type]
    assert not path.exists()  # no token drawn
    for client in raw:
        assert await client.exists(locker.key(resource)) == 0  # nothing sent


@pytest.mark.parametrize("tokens", [object(), 5, "sqlite:///tokens.db", SQLiteTokens])
def test_a_token_source_of_the_wrong_kind_is_refused(tmp_path: Path, tokens: object) -> None:
    with pytest.raises(ConfigurationError, match="tokens must be a TokenSource"):
        check_tokens(tokens)
    check_tokens(None)  # and no source, or a real one, is accepted
    check_tokens(SQLiteTokens(tmp_path / "tokens.db"))


def test_a_redlock_refuses_a_token_source_of_the_wrong_kind(urls: list[str]) -> None:
    with pytest.raises(ConfigurationError, match="tokens must be a TokenSource"):
        Redlock(urls, tokens=object())  # type: ignore[call-overload]
