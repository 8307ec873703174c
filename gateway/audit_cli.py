"""`fencegate audit verify`: check the audit trail offline, straight from the database.

It reads every entry of `fencegate_audit` and the marks, prints what it read
(entries, id range, outcomes, resources) and whether accepted tokens ever
went back per resource; the exit code is 0 when they did not, 1 when they
did, 2 when the database could not be read. The gateway need not run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from storage import StorageError, open_engine
from storage.verify import AuditReport, verify_audit

ENV_STORAGE = "FENCEGATE_STORAGE"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "audit",
        help="check the gateway's audit trail offline",
        description="Read the audit trail of a gateway's database and check it.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    verify = actions.add_parser(
        "verify", help="check that accepted tokens never went back per resource, and print what was read"
    )
    verify.add_argument(
        "--storage",
        default=os.environ.get(ENV_STORAGE),
        help=f"the gateway's storage URL, sqlite:///PATH or postgresql://... (default: ${ENV_STORAGE})",
    )
    parser.set_defaults(func=run)


async def _verify(url: str) -> AuditReport:
    engine = open_engine(url)
    try:
        return await verify_audit(engine)
    finally:
        await engine.dispose()


def run(args: argparse.Namespace) -> int:
    if not args.storage:
        print(f"fencegate audit: give --storage URL or ${ENV_STORAGE}", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(_verify(args.storage))
    except StorageError as exc:
        print(f"fencegate audit: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    return 0 if report.ok else 1
