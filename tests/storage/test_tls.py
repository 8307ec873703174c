"""The gateway's storage over TLS: libpq's parameters in the storage URL, failures that say why.

The fenced store's own behaviour over TLS (fence, concurrency) runs in every
storage test through the `postgresql-tls` engine of `store_url`; here, what is
TLS's alone: the connection really is TLS with the client certificate, each
mistake is refused with its reason, and nothing falls back to plaintext.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from fencegate.cli import main
from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.certs import Authority
from storage import SchemaError, StorageUnavailable, migrate, open_engine
from tests.urls import edit_query, with_host, without_query


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """Another CA, of the same name: it signed nothing the server shows."""
    return Authority(tmp_path_factory.mktemp("stranger"))


async def test_storage_connects_over_tls_with_its_client_certificate(
    postgres_tls_cluster: LocalCluster,
) -> None:
    engine = open_engine(postgres_tls_cluster.postgres_dsn)
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


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        ("wrong CA", "not signed by the CA this client trusts"),
        ("wrong host", "not valid for the name connected to"),
        ("no client certificate", "requires a valid client certificate"),
        ("plaintext", "no encryption"),
    ],
)
async def test_storage_tls_failures_are_unavailable_with_the_reason(
    postgres_tls_cluster: LocalCluster, stranger: Authority, break_it: str, message: str
) -> None:
    dsn = postgres_tls_cluster.postgres_dsn
    broken = {
        "wrong CA": edit_query(dsn, sslrootcert=str(stranger.cert)),
        "wrong host": with_host(dsn, "localhost"),
        "no client certificate": edit_query(dsn, sslcert=None, sslkey=None),
        "plaintext": without_query(dsn),
    }[break_it]
    engine = open_engine(broken)
    try:
        with pytest.raises(StorageUnavailable, match=message):
            await migrate(engine)
    finally:
        await engine.dispose()


async def test_storage_that_asked_for_tls_never_falls_back_to_plaintext(
    postgres_cluster: LocalCluster, stranger: Authority
) -> None:
    """The plain server accepts plaintext; a URL that says TLS must fail instead of using it."""
    engine = open_engine(
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
    with pytest.raises(SchemaError, match=message):
        open_engine(f"postgresql://fencegate@db.example:5432/fencegate?{query}")


def test_serve_refuses_to_start_with_one_line_saying_why(
    postgres_tls_cluster: LocalCluster,
    stranger: Authority,
    capsys: pytest.CaptureFixture[str],
) -> None:
    storage = edit_query(postgres_tls_cluster.postgres_dsn, sslrootcert=str(stranger.cert))
    assert main(["serve", "--port", "0", "--storage", storage]) == 2
    error = capsys.readouterr().err
    assert error.startswith("fencegate serve: ")
    assert "not signed by the CA this client trusts" in error
