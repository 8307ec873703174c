"""The gateway's storage over TLS: libpq's parameters in the storage URL, failures that say why.

The fenced store's own behaviour over TLS (fence, concurrency) runs in every
storage test through the `postgresql-tls` engine of `store_url`; here, what is
TLS's alone: the connection really is TLS with the client certificate, each
mistake is refused with its reason, and nothing falls back to plaintext.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import text

from fencegate.cli import main
from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.certs import Authority
from gateway.storage_tls import open_storage
from storage import BadStorageURL, BelowMark, SqlObjectStore, StorageUnavailable, migrate, open_engine
from storage.postgresql.group_commit import PgGroupCommitStore
from tests.databases import client_connections_tls
from tests.urls import POSTGRES_TLS_MISTAKES, broken_postgres_tls, edit_query


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """Another CA, of the same name: it signed nothing the server shows."""
    return Authority(tmp_path_factory.mktemp("stranger"))


async def test_storage_connects_over_tls_with_its_client_certificate(
    postgres_tls_cluster: LocalCluster,
) -> None:
    engine = open_storage(postgres_tls_cluster.postgres_dsn)
    try:
        await migrate(engine)
        async with engine.connect() as conn:
            ssl, version, client = (
                await conn.execute(
                    text("SELECT ssl, version, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                )
            ).one()
    finally:
        await engine.dispose()
    assert ssl is True
    assert version in ("TLSv1.2", "TLSv1.3")
    assert client == "/CN=postgres"


@pytest.mark.parametrize(("break_it", "message"), POSTGRES_TLS_MISTAKES.items())
async def test_storage_tls_failures_are_unavailable_with_the_reason(
    postgres_tls_cluster: LocalCluster, stranger: Authority, break_it: str, message: str
) -> None:
    broken = broken_postgres_tls(postgres_tls_cluster.postgres_dsn, break_it, stranger_ca=str(stranger.cert))
    engine = open_storage(broken)
    try:
        with pytest.raises(StorageUnavailable, match=message):
            await migrate(engine)
    finally:
        await engine.dispose()


async def test_storage_that_asked_for_tls_never_falls_back_to_plaintext(
    postgres_cluster: LocalCluster, stranger: Authority
) -> None:
    """The plain server accepts plaintext; a URL that says TLS must fail instead of using it."""
    engine = open_storage(
        edit_query(postgres_cluster.postgres_dsn, sslmode="verify-full", sslrootcert=str(stranger.cert))
    )
    try:
        with pytest.raises(StorageUnavailable, match="rejected SSL upgrade"):
            await migrate(engine)
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("sslmode=prefer", "falls back to plaintext"),
        ("sslmode=verify-full", "needs sslrootcert"),
        ("sslrootcert=/etc/ssl/ca.pem", "TLS is off"),
        ("sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", "cannot use the CA file"),
        ("sslmode=require&sslcrtfile=x", "not a TLS parameter"),
    ],
)
def test_storage_urls_with_unusable_tls_parameters_are_refused_before_connecting(
    query: str, message: str
) -> None:
    with pytest.raises(BadStorageURL, match=message):
        open_storage(f"postgresql://fencegate@db.example:5432/fencegate?{query}")


def test_serve_refuses_to_start_with_one_line_saying_why(
    postgres_tls_cluster: LocalCluster,
    stranger: Authority,
    capsys: pytest.CaptureFixture[str],
) -> None:
    storage = edit_query(postgres_tls_cluster.postgres_dsn, sslrootcert=str(stranger.cert))
    assert main(["serve", "--port", "0", "--storage", storage]) == 3  # a service in the way (docs/cli.md)
    error = capsys.readouterr().err
    assert error.startswith("fencegate serve: ")
    assert "not signed by the CA this client trusts" in error


async def test_postgres_group_commit_writer_connects_over_tls_and_keeps_the_fence(
    postgres_tls_cluster: LocalCluster,
) -> None:
    """The group-commit writer takes its connections from the engine's pool: TLS with the client
    certificate like every other, and concurrent fenced writes on it still refuse stale tokens."""
    dsn = postgres_tls_cluster.postgres_dsn
    engine = open_storage(dsn)
    await migrate(engine)
    store = PgGroupCommitStore(SqlObjectStore(engine), engine=engine, lanes=2)
    await store.start()
    resource = f"tls-{uuid.uuid4().hex[:12]}"
    tokens = [5, 3, 9, 7, 2, 9, 4]  # concurrent, after a committed 9: only the 9s pass
    try:
        await store.put(f"{resource}/first", b"x", resource=resource, token=9)
        results = await asyncio.gather(
            *(store.put(f"{resource}/k{i}", b"x", resource=resource, token=t) for i, t in enumerate(tokens)),
            return_exceptions=True,
        )
        mark = await store.mark(resource)
        connections = await client_connections_tls(dsn)  # the writer's lanes keep theirs while it runs
    finally:
        await store.aclose()
        await engine.dispose()
    assert mark == 9
    passed = [t for t, r in zip(tokens, results, strict=True) if not isinstance(r, BaseException)]
    assert passed == [9, 9], results
    refused = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(r, BelowMark) and r.highest == 9 for r in refused), refused
    assert connections == {(True, "/CN=postgres")}  # the writer's lanes among them, open while it runs


async def test_postgres_group_commit_writer_gets_the_urls_tls_settings(
    postgres_tls_cluster: LocalCluster, stranger: Authority
) -> None:
    """A wrong CA in the URL reaches the writer's connections too: requests fail, nothing is written."""
    engine = open_storage(edit_query(postgres_tls_cluster.postgres_dsn, sslrootcert=str(stranger.cert)))
    store = PgGroupCommitStore(SqlObjectStore(engine), engine=engine)
    await store.start()
    try:
        with pytest.raises(StorageUnavailable):
            await store.put(f"ca-{uuid.uuid4().hex[:12]}", b"x", resource="tls-ca", token=1)
    finally:
        await store.aclose()
        await engine.dispose()


def test_storage_alone_refuses_tls_parameters_it_cannot_read() -> None:
    """storage imports no lockclient: without the gateway's TLS reader, TLS parameters are an error,
    never passed to the driver or dropped (a plaintext connection the URL did not ask for)."""
    url = "postgresql://fencegate@db.example:5432/fencegate?sslmode=verify-full&sslrootcert=/etc/ca.pem"
    with pytest.raises(BadStorageURL, match=r"TLS parameters \(sslmode, sslrootcert\) need a TLS reader"):
        open_engine(url)
