"""`fencegate serve` whose s3 upstream gets its writes without preconditions: the tests' control only.

`python -m tests.gateway.unconditional_serve ARGS` is `fencegate serve ARGS`
with the app's `s3_conditional` set False (and so no probe). A test that
finds no violation with the conditional proxy runs its workload through
this too and must find one: proof that the check can see what it guards.
"""

from __future__ import annotations

import sys
from typing import Any

from aiohttp import web

import gateway.serve
from fencegate.cli import main
from gateway.app import create_app
from gateway.app_keys import AppKeys


def _unconditional(*args: Any, **kwargs: Any) -> web.Application:
    app = create_app(*args, **kwargs)
    app[AppKeys.s3_conditional] = False
    return app


if __name__ == "__main__":
    gateway.serve.create_app = _unconditional  # type: ignore[attr-defined]
    sys.exit(main(["serve", *sys.argv[1:]]))
