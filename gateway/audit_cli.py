"""`fencegate audit verify` and `audit archive`: check the audit trail offline, and move its old entries
to checked archives.

It reads every entry of `fencegate_audit` and the marks, prints what it read
(entries, id range, outcomes, resources, the chain head to export), whether
the hash chain holds (and every `--head HASH@ID` exported earlier is still in
it) and whether accepted tokens ever went back per resource; the exit code is
0 when all holds, 1 when not, 2 for a bad URL or head and 3 when the
database could not be read. The gateway need not run.

A verify never creates a store or changes a file that is not one: a SQLite
path that is missing, empty, not a SQLite database, or a database without
fencegate's schema table is refused as bad input (2), found by a read-only
look before the store is opened (opening would create the file, or make an
empty one a database).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import make_url

from gateway.errors import BadSetting
from gateway.settings_checks import check_storage_url
from gateway.settings_cli import env_name
from gateway.storage_tls import open_storage
from storage.archive import ArchiveResult, archive_audit
from storage.chain import Head
from storage.models import SchemaVersion
from storage.verify import AuditReport, verify_audit

ENV_STORAGE = env_name("storage")


PROGRESS_EVERY = 100_000  # entries between two progress lines on stderr


def progress_printer() -> Callable[[int], None]:
    """A `verify_audit` progress callback: a line on stderr each time another `PROGRESS_EVERY`
    entries were checked (a trail of millions takes a minute or more)."""
    shown = 0

    def show(checked: int) -> None:
        nonlocal shown
        if checked // PROGRESS_EVERY > shown:
            shown = checked // PROGRESS_EVERY
            print(f"fencegate audit verify: {checked} entries checked", file=sys.stderr, flush=True)

    return show


GATEWAY_FILE = "give the gateway's file (fencegate.db in its --data-dir)"


def _read_only_uri(database: str) -> str:
    """SQLite's URI for `database`, read-only: opening it cannot create the file or write to it."""
    return f"{Path(database).resolve().as_uri()}?mode=ro"


def check_sqlite_store(database: str) -> None:
    """Refuse (`BadSetting`, exit 2) a path that is not a fencegate SQLite store; reads only.

    An empty file is a valid empty database to SQLite, so the schema table is what tells a store.
    """
    if not Path(database).is_file():
        # opening it would create an empty database there, and find nothing
        raise BadSetting(f"--storage: there is no SQLite database at {database}; {GATEWAY_FILE}")
    if Path(database).stat().st_size == 0:  # SQLite would read it as an empty database
        raise BadSetting(f"--storage: {database} is an empty file, not a gateway's store; {GATEWAY_FILE}")
    try:
        with contextlib.closing(sqlite3.connect(_read_only_uri(database), uri=True)) as conn:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                (SchemaVersion.__tablename__,),
            ).fetchone()
    except sqlite3.DatabaseError as exc:  # "file is not a database", "unable to open database file"
        raise BadSetting(f"--storage: {database} is not a SQLite database ({exc}); {GATEWAY_FILE}") from None
    if found is None:
        raise BadSetting(
            f"--storage: {database} is a SQLite database without fencegate's tables "
            f"(no {SchemaVersion.__tablename__}), not a gateway's store; {GATEWAY_FILE}"
        )


async def _verify(url: str, heads: list[Head], archives: list[Path]) -> AuditReport:
    engine = open_storage(url)
    try:
        return await verify_audit(engine, heads=heads, progress=progress_printer(), archives=archives)
    finally:
        await engine.dispose()


def _checked_storage(args: argparse.Namespace) -> str:
    if not args.storage:
        raise BadSetting(f"give --storage URL or ${ENV_STORAGE}")
    check_storage_url(args.storage)
    url = make_url(args.storage)
    if url.get_backend_name() == "sqlite" and url.database:
        check_sqlite_store(url.database)
    storage: str = args.storage
    return storage


def cutoff(text: str) -> tuple[int | None, datetime | None]:
    """`--before`: an entry id (digits, at least 1) or an ISO 8601 time (UTC without an offset)."""
    if text.isdigit() and text.isascii():
        if int(text) < 1:
            raise BadSetting("--before 0: give an entry id of at least 1, or a time")
        return int(text), None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise BadSetting(
            f"--before {text[:40]!r} is neither an entry id nor an ISO 8601 time (2026-11-01T00:00:00Z)"
        ) from None
    return None, at if at.tzinfo is not None else at.replace(tzinfo=UTC)


async def _archive(
    url: str, to: Path, before: tuple[int | None, datetime | None], batch: int
) -> ArchiveResult:
    engine = open_storage(url)
    try:
        return await archive_audit(engine, to=to, before_id=before[0], before_time=before[1], batch=batch)
    finally:
        await engine.dispose()


def _run_archive(args: argparse.Namespace) -> int:
    """`fencegate audit archive`: 0 once the archive is written, checked and its entries deleted."""
    before = cutoff(args.before)
    url = _checked_storage(args)
    result = asyncio.run(_archive(url, args.to, before, args.batch))
    info = result.archive
    done = {
        "archive": None if info is None else str(info.path),
        "first_id": None if info is None else info.first_id,
        "last_id": None if info is None else info.last_id,
        "ends_on": None if info is None else str(info.end),
        "deleted": result.deleted,
    }
    if args.json:
        print(json.dumps(done, indent=2))
    elif info is None:
        print("nothing to archive: no entry before the cutoff")
    else:
        print(
            f"archived entries {info.first_id}..{info.last_id} to {info.path} (ends on {info.end}); "
            f"deleted {result.deleted} from the database"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    """`fencegate audit verify`: 0 when the trail is sound, 1 when it is not; errors raise."""
    if args.action == "archive":
        return _run_archive(args)
    if not args.storage:
        raise BadSetting(f"give --storage URL or ${ENV_STORAGE}")
    check_storage_url(args.storage)  # a bad URL, then a bad head, then a file that is no store
    heads = []
    for text in args.head:
        try:
            heads.append(Head.parse(text))
        except ValueError as exc:
            raise BadSetting(f"--head: {exc}") from None
    url = _checked_storage(args)
    report = asyncio.run(_verify(url, heads, list(args.archive)))
    print(json.dumps(report.as_dict(), indent=2) if args.json else "\n".join(report.lines()))
    return 0 if report.ok else 1
