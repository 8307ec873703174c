"""Open the SQLAlchemy async engine with the durability settings the fence needs.

SQLite (aiosqlite) runs in WAL mode with `synchronous=FULL`, so a commit is on
disk before it returns; writers start with `BEGIN IMMEDIATE`, which takes the
write lock up front instead of failing with "database is locked" when a
reader upgrades. PostgreSQL (asyncpg) is durable by default
(`synchronous_commit=on`); connections are pinged before use so a restarted
server costs one 503, not a pool of dead sockets.

TLS to PostgreSQL: the URL may carry libpq's `sslmode`, `sslrootcert`, ...
parameters, read by a `TLSReader` the caller gives (the gateway's
`gateway.storage_tls.open_storage` gives the one the PostgreSQL token source
uses, so one syntax and one implementation serve both, while storage imports
no lockclient: docs/architecture.md). Every connection of the engine's pool,
the group-commit writer's too, opens through it. Without a reader, TLS
parameters are refused rather than passed to the driver or dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from lockclient.sqlite_wal import enter_wal
from storage.errors import BadStorageURL, StorageUnavailable

DoConnect = Callable[[Any, Any, Any, dict[str, Any]], Any]  # SQLAlchemy's do_connect event handler
# A PostgreSQL URL (asyncpg's) -> the URL without its TLS parameters, and how to open each connection
# with them; a bad parameter raises BadStorageURL, a failed handshake StorageUnavailable with the reason.
TLSReader = Callable[[str], tuple[str, DoConnect]]

SQLITE_BUSY_TIMEOUT = 30.0  # seconds a writer waits for another process's write lock
CONNECT_TIMEOUT = 5.0  # seconds to open a PostgreSQL connection (at most `command_timeout`), then 503
USE = "use sqlite:///PATH or postgresql://USER@HOST/DB"
MAX_PORT = 65535
REFUSED_LOGIN = "28"  # SQLSTATE class 28, invalid authorization specification: pg_hba.conf said no
READ_ONLY = "fencegate_read_only"  # execution option: a plain deferred BEGIN on SQLite


def normalize_url(url: str) -> str:
    """Map `sqlite:///path` and `postgresql://...` to their async drivers; any other URL, or one whose
    port could never be connected to, is `BadStorageURL`. Its message says what is wrong and never
    repeats the URL (it may hold a password): a caller names it masked (`check_storage_url`)."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise BadStorageURL(f"not a URL; {USE}") from exc
    except ValueError:  # SQLAlchemy's int() of a port that is no number (or of an unclosed [::1)
        raise BadStorageURL(
            "its HOST:PORT cannot be read; give a port from 1 to 65535, "
            "and an IPv6 address in brackets ([::1]:5432)"
        ) from None
    if parsed.port is not None and not 0 < parsed.port <= MAX_PORT:
        raise BadStorageURL(f"port {parsed.port} is out of range; give a port from 1 to 65535")
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise BadStorageURL(
                "an in-memory SQLite database is not durable and not shared between "
                "connections; give a file path, e.g. sqlite:///var/lib/fencegate/store.db"
            )
        return parsed.set(drivername="sqlite+aiosqlite").render_as_string(hide_password=False)
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
    raise BadStorageURL(f"unsupported storage; {USE}")


def open_engine(url: str, *, command_timeout: float = 10.0, tls: TLSReader | None = None) -> AsyncEngine:
    """An engine for `url`, with PostgreSQL's TLS parameters read by `tls`; its owner must
    `await engine.dispose()`."""
    target = normalize_url(url)
    if target.startswith("sqlite"):
        engine = create_async_engine(target, connect_args={"timeout": SQLITE_BUSY_TIMEOUT})
        _configure_sqlite(engine)
        return engine
    if tls is not None:
        target, connect = tls(target)
    elif tls_parameters := [k for k, _ in parse_qsl(urlsplit(target).query) if k.startswith("ssl")]:
        raise BadStorageURL(
            f"storage URL: TLS parameters ({', '.join(tls_parameters)}) need a TLS reader: open it with "
            "gateway.storage_tls.open_storage, or drop them for plaintext"
        )
    else:
        connect = _plain_connect
    engine = create_async_engine(
        target,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=10,
        pool_timeout=command_timeout,
        # a connect (asyncpg's handshake included) is one command too: no longer than `command_timeout`
        connect_args={"timeout": min(CONNECT_TIMEOUT, command_timeout), "command_timeout": command_timeout},
    )

    @event.listens_for(engine.sync_engine, "do_connect")
    def _connect(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        """Each new connection: TLS as the URL says. The server's refusal of the client (pg_hba.conf:
        no TLS, no client certificate, a wrong password) is reported with its reason, which names no
        SQL or parameter: it needs the operator's fix, not a retry."""
        try:
            return connect(dialect, record, cargs, cparams)
        except dialect.loaded_dbapi.Error as exc:
            if not str(getattr(exc, "sqlstate", "")).startswith(REFUSED_LOGIN):
                raise
            where = f"{cparams.get('host')}:{cparams.get('port')}"
            raise StorageUnavailable(f"storage could not connect: PostgreSQL at {where} said: {exc}") from exc

    return engine


def _plain_connect(dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
    return dialect.connect(*cargs, **cparams)


def _configure_sqlite(engine: AsyncEngine) -> None:
    # The driver's own transaction handling is turned off so that BEGIN is ours:
    # SQLAlchemy's documented recipe for pysqlite/aiosqlite (it also makes
    # SAVEPOINT work).
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # a new (empty) file is made with deletes' pages reclaimable (storage/sqlite/vacuum.py); an
            # existing one is not touched: setting it there rewrites its header, and a reader (audit verify)
            # must change no byte of the file
            cursor.execute("PRAGMA page_count")
            if cursor.fetchone()[0] == 0:
                cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
            enter_wal(cursor.execute, timeout=SQLITE_BUSY_TIMEOUT)
            cursor.execute("PRAGMA synchronous=FULL")
            cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT * 1000)}")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        read_only = conn.get_execution_options().get(READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")
