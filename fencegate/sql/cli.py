"""`fencegate sql install|uninstall`: the trigger that fences every writer of one of the user's tables.

`install` creates the marks table (`fencegate_marks`), its schema-version
table and, unless `--marks-only`, the trigger on `--table`; `--print` shows
that SQL for review and runs nothing. Before anything is created the
command checks, in the transaction that will create it, that the table and
its columns exist with types that can hold a token (a 64-bit integer) and a
resource (text); any failure, an unreachable database included, is one line
and exit 2 with nothing created. A second install finds its trigger and
says so, changing nothing; `uninstall` drops only the trigger and its
function (the marks stay: the call and other tables fence on them).

SQL comes from `lockclient.sql` (`install_statements`, `uninstall_statements`),
so what `--print` shows is what runs, and what the library documents.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fencegate.cli import OK, add_action, add_actions, describe, seconds_up_to

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["configure"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 5.0  # seconds to connect and for each statement
EXAMPLE_URL = "postgresql://app@10.0.0.5/shop"
EXAMPLE = (
    f"fencegate sql install --url {EXAMPLE_URL} --table orders --token-column fence --resource-column shop"
)


def configure(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Install or remove the trigger that fences every writer of one of your tables: an INSERT or UPDATE "
        "whose token is below its resource's mark is refused, any other raises the mark. Only fencegate's "
        "own objects (fencegate_*) are created; your tables and data are never changed. See "
        "docs/own-tables.md.",
        EXAMPLE,
        "fencegate sql install --url sqlite:///app.db --table ledger --token-column fence --resource ledger "
        "--print",
        "fencegate sql uninstall --url sqlite:///app.db --table orders",
    )
    actions = add_actions(parser)
    install = add_action(
        actions,
        "install",
        _install,
        EXAMPLE,
        "fencegate sql install --url sqlite:///app.db --marks-only --print",
        help="create the marks table and the trigger on --table (idempotent)",
        description="Create fencegate_marks, its schema version and the trigger on TABLE, in one "
        "transaction, after checking the table and its columns. A second install changes nothing and says "
        "so.",
    )
    _common(install)
    install.add_argument(
        "--token-column",
        metavar="COLUMN",
        help="the table's token column, a 64-bit integer (BIGINT) (default: none; needed with --table)",
    )
    where = install.add_mutually_exclusive_group()
    where.add_argument(
        "--resource-column",
        metavar="COLUMN",
        help="the text column that names each row's resource (default: none)",
    )
    where.add_argument(
        "--resource",
        metavar="NAME",
        help="one resource for the whole table, instead of --resource-column (default: none)",
    )
    install.add_argument(
        "--marks-only",
        action="store_true",
        help="create only the marks table, for fence() in your own transactions (no --table needed)",
    )
    uninstall = add_action(
        actions,
        "uninstall",
        _uninstall,
        "fencegate sql uninstall --url sqlite:///app.db --table orders --print",
        help="drop the trigger on --table and its function (the marks stay)",
        description="Drop the trigger on TABLE and its function. The marks table stays: fence() and the "
        "other tables' triggers use it, and dropping a mark would let a stale token through later.",
    )
    _common(uninstall)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        required=True,
        metavar="URL",
        help="the database: postgresql://user[:password]@host[:port]/db (libpq's sslmode and friends "
        "accepted) or sqlite:///path/to/file.db (the file must exist)",
    )
    parser.add_argument(
        "--table",
        metavar="TABLE",
        help="the table to fence, schema.table on PostgreSQL (default: none; needed but with --marks-only)",
    )
    parser.add_argument("--print", action="store_true", help="print the SQL and run nothing")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.add_argument(
        "--timeout",
        type=seconds_up_to(300),
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait to connect, and for each statement",
    )


@dataclass(frozen=True)
class Target:
    """Where the command works: the dialect, the table (None with --marks-only) and the SQL to run."""

    dialect: str
    url: str
    table: str | None
    statements: list[str]


def _install(args: argparse.Namespace) -> int:
    from lockclient.errors import ConfigurationError
    from lockclient.sql import install_statements, marks_statements

    dialect = _dialect(args.url)
    if args.marks_only:
        if args.table or args.token_column or args.resource_column or args.resource:
            raise ConfigurationError("--marks-only creates no trigger: give it without --table and columns")
        statements = marks_statements(dialect)
    else:
        if args.table is None or args.token_column is None:
            raise ConfigurationError(
                "install needs --table and --token-column (and --resource-column or --resource), or "
                "--marks-only for the marks table alone"
            )
        statements = install_statements(
            dialect,
            table=args.table,
            token_column=args.token_column,
            resource_column=args.resource_column,
            resource=args.resource,
        )
    target = Target(dialect, args.url, None if args.marks_only else args.table, statements)
    if args.print:
        return _print(target.statements)
    changed = asyncio.run(_run(target, args, install=True))
    return _report(args, "install", target, changed)


def _uninstall(args: argparse.Namespace) -> int:
    from lockclient.errors import ConfigurationError
    from lockclient.sql import uninstall_statements

    dialect = _dialect(args.url)
    if args.table is None:
        raise ConfigurationError("uninstall needs --table: the table whose trigger to drop")
    target = Target(dialect, args.url, args.table, uninstall_statements(dialect, table=args.table))
    if args.print:
        return _print(target.statements)
    changed = asyncio.run(_run(target, args, install=False))
    return _report(args, "uninstall", target, changed)


def _print(statements: list[str]) -> int:
    print("".join(f"{statement};\n\n" for statement in statements), end="")
    return OK


def _report(args: argparse.Namespace, action: str, target: Target, changed: bool) -> int:
    what = f"the trigger on {target.table}" if target.table else "the marks table"
    if args.json:
        print(
            json.dumps(
                {"action": action, "table": target.table, "dialect": target.dialect, "changed": changed}
            )
        )
    elif changed:
        print(f"{action}ed {what} ({target.dialect}, {len(target.statements)} statements)")
    elif action == "install":
        print(f"{what} is already installed: nothing changed (uninstall first to change its columns)")
    else:
        print(f"no fencegate trigger on {target.table}: nothing changed")
    return OK


def _dialect(url: str) -> str:
    from lockclient.errors import ConfigurationError

    scheme = url.partition("://")[0].partition("+")[0]
    if scheme in ("postgresql", "postgres"):
        return "postgresql"
    if scheme == "sqlite":
        return "sqlite"
    raise ConfigurationError(
        f"--url must be a postgresql:// or sqlite:/// URL, got a {scheme or 'scheme-less'} one: e.g. "
        f"{EXAMPLE_URL} or sqlite:///app.db"
    )


async def _run(target: Target, args: argparse.Namespace, *, install: bool) -> bool:
    """Check, then run the statements in one transaction; whether anything changed."""
    from sqlalchemy.exc import SQLAlchemyError

    from fencegate.sql.catalog import check_columns, installed
    from lockclient.errors import ConfigurationError, LockClientError
    from lockclient.transport.endpoint import redact

    engine = _engine(target, args.timeout)
    try:
        async with engine.connect() as conn, conn.begin():
            present = await installed(conn, target.dialect, target.table)
            if present == install:
                return False
            if install and target.table is not None:
                await check_columns(
                    conn, target.dialect, target.table, args.token_column, args.resource_column
                )
            for statement in target.statements:
                await conn.exec_driver_sql(statement)
        return True
    except (OSError, SQLAlchemyError, LockClientError) as exc:
        if isinstance(exc, ConfigurationError):
            raise
        log.debug("fencegate sql on %s failed", redact(target.url), exc_info=True)
        raise ConfigurationError(
            f"could not {'install' if install else 'uninstall'} on {redact(target.url)}: {_reason(exc)}; "
            "nothing was changed"
        ) from exc
    finally:
        await engine.dispose()


def _reason(exc: BaseException) -> str:
    """The database's or the network's own words, one line, without the SQL SQLAlchemy adds."""
    cause = getattr(exc, "orig", None) or exc
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]


def _driver_autocommit(dbapi_connection: Any, _record: Any) -> None:
    """SQLite's driver begins a transaction only before a row is written, so the DDL before it would
    commit one statement at a time; the command begins its own transaction instead (`_begin_immediate`)."""
    dbapi_connection.isolation_level = None


def _begin_immediate(conn: Connection) -> None:
    """The check and the install in one transaction holding the write lock: all or nothing, and no
    second install runs between this one's check and its statements."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _engine(target: Target, timeout: float) -> AsyncEngine:
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    from lockclient.errors import ConfigurationError

    if target.dialect == "sqlite":
        path = Path(target.url.partition(":///")[2].partition("?")[0])
        if not path.is_file():
            raise ConfigurationError(
                f"no SQLite database at {path}: give the file that holds the table (nothing was created)"
            )
        # mode=rw: the driver never creates a file the check above did not see
        url = f"sqlite+aiosqlite:///file:{path}?mode=rw&uri=true"
        sqlite = create_async_engine(url, connect_args={"timeout": timeout})
        event.listen(sqlite.sync_engine, "connect", _driver_autocommit)
        event.listen(sqlite.sync_engine, "begin", _begin_immediate)
        return sqlite
    from lockclient.postgres_tls import split_tls
    from lockclient.tokens.postgres import asyncpg_url

    url, tls = split_tls(asyncpg_url(target.url))
    engine = create_async_engine(url, connect_args={"timeout": timeout, "command_timeout": timeout})
    event.listen(engine.sync_engine, "do_connect", tls.do_connect)
    return engine
