"""Token sources over TLS, on a PostgreSQL with `ssl=on` and a ZooKeeper with a secure client port.

Both servers are TLS only and require a client certificate. Each failure a
user can cause (a CA that did not sign the server's certificate, a host name
the certificate does not list, no client certificate) is a `TokenSourceError`
that says so, and a TLS client never falls back to plaintext: against a
server without TLS it fails instead of drawing a token.
"""

from __future__ import annotations

import asyncio
import gc
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.cluster.certs import Authority
from lockclient import PostgresTokens, TokenSource, TokenSourceError, ZooKeeperTokens, open_token_source
from lockclient.tokens.zookeeper import url_options
from tests.lockclient.test_tokens import across_a_restart, fresh_database
from tests.urls import POSTGRES_TLS_MISTAKES, broken_postgres_tls, edit_query, with_host, without_query

WRONG_CA = "not signed by the CA this client trusts"
WRONG_HOST = "not valid for the name connected to"
ZOOKEEPER_TIMEOUT = 2.0  # seconds: kazoo retries a failed handshake until then


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """Another CA, of the same name: it signed nothing the servers show."""
    return Authority(tmp_path_factory.mktemp("stranger"))


def _zookeeper(url: str, **settings: Any) -> ZooKeeperTokens:
    """The source a zookeeper:// URL names, with other settings (timeouts) beside its TLS parameters."""
    parts = urlsplit(url)
    return ZooKeeperTokens(parts.netloc, **url_options(parts.query), **settings)


async def _tls_of_my_connections(admin_dsn: str, database: str) -> list[tuple[bool, str | None, str]]:
    """(ssl, client certificate's subject, its serial) of each connection to `database`, server side."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        rows = await conn.fetch(
            "SELECT s.ssl, s.client_dn, s.client_serial::text FROM pg_stat_ssl s "
            "JOIN pg_stat_activity a USING (pid) WHERE a.datname = $1",
            database,
        )
    finally:
        await conn.close()
    return [(row[0], row[1], row[2]) for row in rows]


async def test_postgres_tokens_over_tls_with_a_client_certificate(
    postgres_tls_cluster: LocalCluster, resource: str
) -> None:
    dsn = await fresh_database(postgres_tls_cluster.postgres_dsn)
    database = dsn.split("?")[0].rsplit("/", 1)[1]
    async with PostgresTokens(dsn) as source:
        tokens = [await source.next_token(resource) for _ in range(3)]
        assert tokens == sorted(tokens)
        assert await source.upper_bound(resource) == tokens[-1]
        seen = await _tls_of_my_connections(postgres_tls_cluster.postgres_dsn, database)
    assert seen, "the source's pooled connection is open"
    assert all(ssl and client == "/CN=postgres" for ssl, client, _ in seen)


async def test_a_renewed_client_certificate_is_used_by_the_next_connection(
    postgres_tls_cluster: LocalCluster, resource: str, tmp_path: Path
) -> None:
    """Files are read per connection (as libpq does): renewing them needs no restart."""
    cert, key = tmp_path / "client.crt", tmp_path / "client.key"
    first = postgres_tls_cluster.authority.issue("postgres", hosts=(), server=False, client=True)
    shutil.copy(first.cert, cert)
    shutil.copy(first.key, key)
    dsn = await fresh_database(postgres_tls_cluster.postgres_dsn)
    dsn = edit_query(dsn, sslcert=str(cert), sslkey=str(key))
    database = dsn.split("?")[0].rsplit("/", 1)[1]
    admin = postgres_tls_cluster.postgres_dsn
    async with PostgresTokens(dsn, pool_size=1) as source:
        before = await source.next_token(resource)
        (serial_before,) = {serial for _, _, serial in await _tls_of_my_connections(admin, database)}
        renewed = postgres_tls_cluster.authority.issue("postgres", hosts=(), server=False, client=True)
        shutil.copy(renewed.cert, cert)
        shutil.copy(renewed.key, key)
        conn = await asyncpg.connect(admin)  # the server drops the pooled connection
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", database
            )
        finally:
            await conn.close()
        after = await source.next_token(resource)
        serials = {serial for _, _, serial in await _tls_of_my_connections(admin, database)}
    assert after > before
    assert serials
    assert serial_before not in serials


async def _refusal(source: TokenSource, resource: str, message: str) -> TokenSourceError:
    """The error `source` raises for a token, which must say `message`."""
    with pytest.raises(TokenSourceError, match=message) as caught:
        await source.next_token(resource)
    return caught.value


# asyncpg leaves the socket of a refused connection attempt to the garbage collector (a
# ResourceWarning, at whatever moment it runs): collected here, inside the test that caused it
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(("break_it", "message"), POSTGRES_TLS_MISTAKES.items())
async def test_postgres_tls_failures_say_why(
    postgres_tls_cluster: LocalCluster, stranger: Authority, resource: str, break_it: str, message: str
) -> None:
    dsn = postgres_tls_cluster.postgres_dsn
    broken = broken_postgres_tls(dsn, break_it, stranger_ca=str(stranger.cert))
    async with PostgresTokens(broken, timeout=10.0) as source:
        assert (await _refusal(source, resource, message)).source == "postgres"
    gc.collect()


async def test_a_postgres_tls_client_never_falls_back_to_plaintext(
    postgres_cluster: LocalCluster, stranger: Authority, resource: str
) -> None:
    """The plain server would accept plaintext: a client that asked for TLS must fail instead."""
    dsn = edit_query(postgres_cluster.postgres_dsn, sslmode="verify-full", sslrootcert=str(stranger.cert))
    for mode in ("verify-full", "verify-ca", "require"):
        async with PostgresTokens(edit_query(dsn, sslmode=mode), timeout=10.0) as source:
            with pytest.raises(TokenSourceError, match="rejected SSL upgrade"):
                await source.next_token(resource)


async def test_zookeeper_tokens_over_tls_with_a_client_certificate(
    zookeeper_tls_cluster: LocalCluster, resource: str
) -> None:
    source = open_token_source(zookeeper_tls_cluster.zookeeper_url)
    assert isinstance(source, ZooKeeperTokens)
    assert source.use_ssl
    async with source:
        tokens = [await source.next_token(resource) for _ in range(3)]
        assert tokens == sorted(tokens)
        assert len(set(tokens)) == 3
        assert await source.upper_bound(resource) >= tokens[-1]  # a fresh write's zxid: above every token


async def test_zookeeper_tls_keyword_settings_are_the_url_parameters(
    zookeeper_tls_cluster: LocalCluster, resource: str
) -> None:
    tls = zookeeper_tls_cluster.nodes["zookeeper-0"].tls
    hosts = zookeeper_tls_cluster.zookeeper
    async with ZooKeeperTokens(
        hosts, use_ssl=True, ca=tls["ca"], certfile=tls["certfile"], keyfile=tls["keyfile"]
    ) as source:
        assert await source.next_token(resource) > 0


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        ("wrong CA", WRONG_CA),
        ("wrong host", WRONG_HOST),
        ("no client certificate", "refused the client's certificate"),
        ("plaintext", "within connect_timeout"),
    ],
)
async def test_zookeeper_tls_failures_say_why(
    zookeeper_tls_cluster: LocalCluster, stranger: Authority, resource: str, break_it: str, message: str
) -> None:
    url = zookeeper_tls_cluster.zookeeper_url
    broken = {
        "wrong CA": edit_query(url, ca=str(stranger.cert)),
        "wrong host": with_host(url, "localhost"),
        "no client certificate": edit_query(url, certfile=None, keyfile=None),
        "plaintext": without_query(url),  # no plaintext port: nothing answers ZooKeeper's protocol
    }[break_it]
    async with _zookeeper(broken, connect_timeout=ZOOKEEPER_TIMEOUT) as source:
        assert (await _refusal(source, resource, message)).source == "zookeeper"


async def test_a_zookeeper_tls_client_never_falls_back_to_plaintext(
    zookeeper_cluster: LocalCluster, zookeeper_tls_cluster: LocalCluster, resource: str
) -> None:
    """The plain server answers plaintext on its port: a client that asked for TLS must fail instead."""
    tls = zookeeper_tls_cluster.nodes["zookeeper-0"].tls
    url = edit_query(f"zookeeper://{zookeeper_cluster.zookeeper}", **tls)
    async with _zookeeper(url, connect_timeout=ZOOKEEPER_TIMEOUT) as source:
        with pytest.raises(TokenSourceError, match="over TLS"):
            await source.next_token(resource)


async def test_zookeeper_tokens_over_tls_keep_increasing_across_a_restart(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], resource: str
) -> None:
    """Reconnecting makes a new TLS connection (the session survives the restart)."""
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, zookeeper_tls="mutual"))
    async with _zookeeper(cluster.zookeeper_url, timeout=60.0) as source:
        before, after = await across_a_restart(cluster, "zookeeper-0", source, resource)
    assert before == sorted(before)
    assert after == sorted(after)
    assert after[0] > before[-1]
