"""The `fencegate` command: one entry point, one sub-command per module.

Each module in `COMMANDS` exposes `register(subparsers)`, which adds its
parser and sets `func` to a callable taking the parsed namespace and
returning the exit code. Imports stay lazy inside each command so
`fencegate --help` is fast and a missing optional extra breaks only its own
command.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

COMMANDS = (
    "fencegate.lab.cluster.cli",
    "fencegate.lab.cli",
    "fencegate.lab.demo",
    "gateway.serve",
    "fencegate.bench.cli",
    "fencegate.model.cli",
    "gateway.keys_cli",
    "gateway.audit_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fencegate",
        description=(
            "Redlock leases that carry fencing tokens, a gateway that refuses stale "
            "writes, and a lab that shows the difference on real faults."
        ),
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="how much to log on stderr (default: %(default)s)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
