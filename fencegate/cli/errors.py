"""How a command's failure reaches the user: one line on stderr, URLs masked, one exit code.

The codes mean the same in every command (docs/cli.md). An error whose class
derives from `ValueError` is the user's input (2), any other error of a
package root in `ERROR_ROOTS` is the world's (3). Anything else is a bug and
keeps its traceback. The roots are looked up only in modules already
imported, so naming them here loads no package.
"""

from __future__ import annotations

import re
import sys

OK, NO, USAGE, UNAVAILABLE, INCOMPLETE = 0, 1, 2, 3, 4
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
TERMINATED = 143  # 128 + SIGTERM
DETAIL_LINES = 20  # of an error's message after its first line (a server's log tail)

# Package roots of the errors a user can cause, by module: checked only if that module was imported.
ERROR_ROOTS = (
    ("gateway.errors", "GatewayServerError"),
    ("storage.errors", "StorageError"),
    ("lockclient.errors", "LockClientError"),
    ("fencegate.lab.cluster.errors", "ClusterError"),
    ("fencegate.lab.errors", "LabError"),
    ("fencegate.model.errors", "ModelError"),
)

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"(),;]+")


def masked(message: str) -> str:
    """`message` with every URL in it masked: a mistyped command line (an argument in the wrong place,
    a URL given to `--port`) may hold a password, and argparse repeats what it was given."""
    if "://" not in message:
        return message
    from lockclient.transport.endpoint import redact  # one mask for every URL; loaded only when needed

    return _URL.sub(lambda found: redact(found.group()), message)


def error_code(exc: BaseException) -> int | None:
    """The exit code of an error a user can cause (see the module docstring); None for a bug."""
    roots = tuple(getattr(sys.modules[module], name) for module, name in ERROR_ROOTS if module in sys.modules)
    if not isinstance(exc, roots):
        return None
    return USAGE if isinstance(exc, ValueError) else UNAVAILABLE


def report(prog: str, exc: Exception) -> int | None:
    """Print `exc` as the user sees it and return its exit code; None (nothing printed) for a bug.

    The first line of the message follows the command's name; the rest (a server's log tail, a
    compiler's output) is indented below it, its last `DETAIL_LINES` lines only.
    """
    code = error_code(exc)
    if code is None:
        return None
    first, *rest = str(exc).splitlines() or [type(exc).__name__]
    print(f"{prog}: {first}", file=sys.stderr)
    for line in rest[-DETAIL_LINES:]:
        print(f"  {line}", file=sys.stderr)
    return code
