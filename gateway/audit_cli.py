"""`fencegate audit verify`: check the audit trail offline, straight from the database.

It reads every entry of `fencegate_audit` and the marks, prints what it read
(entries, id range, outcomes, resources, the chain head to export), whether
the hash chain holds (and every `--head HASH@ID` exported earlier is still in
it) and whether accepted tokens ever went back per resource; the exit code is
0 when all holds, 1 when not, 2 for a bad URL or head and 3 when the
database could not be read. The gateway need not run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import make_url

from gateway.config import check_storage_url, env_name
from gateway.errors import ConfigurationError
from gateway.storage_tls import open_storage
from storage.chain import Head
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


async def _verify(url: str, heads: list[Head]) -> AuditReport:
    engine = open_storage(url)
    try:
        return await verify_audit(engine, heads=heads, progress=progress_printer())
    finally:
        await engine.dispose()


def run(args: argparse.Namespace) -> int:
    """`fencegate audit verify`: 0 when the trail is sound, 1 when it is not; errors raise."""
    if not args.storage:
        raise ConfigurationError(f"give --storage URL or ${ENV_STORAGE}")
    check_storage_url(args.storage)
    heads = []
    for text in args.head:
        try:
            heads.append(Head.parse(text))
        except ValueError as exc:
            raise ConfigurationError(f"--head: {exc}") from None
    url = make_url(args.storage)
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).is_file():
        raise ConfigurationError(  # opening it would create an empty database there, and find nothing
            f"--storage: there is no SQLite database at {url.database}; give the gateway's file "
            "(fencegate.db in its --data-dir)"
        )
    report = asyncio.run(_verify(args.storage, heads))
    print(json.dumps(report.as_dict(), indent=2) if args.json else "\n".join(report.lines()))
    return 0 if report.ok else 1
