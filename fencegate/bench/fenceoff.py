"""A yardstick for the gateway benchmark: `fencegate serve` with the fence taken out.

Run as `python -m fencegate.bench.fenceoff --log-level WARNING serve ...` (the
same arguments as `fencegate serve`). It is the same process as the product:
the same app, middlewares, storage, durable commit, group commit, bindings
and audit trail, built with the fenced unit's `Policy(fence=False)`: no mark
is read, compared or written, so every token is accepted (and the audit
entry says it passed). "Fence on >= 0.9x fence off" then measures everything
the fence costs, the mark's row included, not only the comparison.

The product has no flag or environment variable that reaches this policy, on
purpose: a gateway that can be told to stop fencing is one configuration
mistake away from the bug it exists to prevent.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from gateway import serve
from gateway.settings_cli import add_arguments
from storage.fenced import Policy

UNFENCED = Policy(fence=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fencegate.bench.fenceoff", description="fencegate serve without the fence"
    )
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)
    add_arguments(sub.add_parser("serve", help="serve the gateway with the fence taken out"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return serve.run(args, policy=UNFENCED)


if __name__ == "__main__":
    sys.exit(main())
