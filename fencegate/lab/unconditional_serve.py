"""`fencegate serve` whose upstream gets every write without preconditions: the lab's and tests' control.

`python -m fencegate.lab.unconditional_serve serve ARGS` is `fencegate serve
ARGS` with the app's `s3_conditional` set False, so the proxy forwards each
write the gateway's own fence accepted as the unconditional proxy does: no
`If-Match`, no `If-None-Match: *`, no probe. It is the same code, the same
SeaweedFS and the same replicas as the conditional rows, with only the
store's compare-and-swap taken away, so the `proxy-delay` scenario's
`s3-unconditional` row shows what that compare-and-swap buys (there is no
command-line flag for it: a user cannot run it by mistake). The race tests run
their workload through it too, s3 and conditional http(s) alike, and must
find a violation: proof that their check sees what it guards.
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
    sys.exit(main(sys.argv[1:]))
