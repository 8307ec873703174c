"""The `fencegate` command: one entry point, one sub-command per module, each loaded only when used.

`COMMANDS` names each command's module and its one-line summary, so
`fencegate --help` imports no command at all, and `fencegate NAME ...`
imports only NAME's module. That module's `configure(parser)` adds the
options (and nested actions) to the parser it is given and sets `func`: a
callable taking the parsed namespace and returning the exit code.

Every failure a user can cause ends as one line on stderr and an exit code
that means the same in every command (docs/cli.md):

  0  done, and the answer is yes (safe, as predicted, checked)
  1  done, and the answer is no (a check failed, a verdict was not as predicted)
  2  the request is wrong: an option, a value, a URL, or a file named that is missing or malformed
  3  the machine or a service is in the way: a port in use, an address this machine does not
     have, a server program not installed, a server that does not start or answer
  4  not finished: part of the work could not be done (a run failed, a search hit its bound)
  130, 143  stopped by Ctrl-C, by SIGTERM

Commands raise their package's errors and `main` turns them into that line
(`errors.py`). The helpers each command's `configure(parser)` uses live
beside this module (`describe.py`, `argtypes.py`, `parser.py`,
`termination.py`) and are imported from here.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import import_module

from fencegate.cli.argtypes import bounded, output_dir, output_file, seconds_up_to
from fencegate.cli.describe import add_action, add_actions, describe, settings_from
from fencegate.cli.errors import (
    ERROR_ROOTS,
    INCOMPLETE,
    INTERRUPTED,
    NO,
    OK,
    TERMINATED,
    UNAVAILABLE,
    USAGE,
    error_code,
    masked,
    report,
)
from fencegate.cli.parser import ENV_LOG_LEVEL, LOG_LEVELS, Parser, PrintVersion
from fencegate.cli.termination import Terminated, terminated, termination_held, until_terminated

__all__ = [
    "COMMANDS",
    "ERROR_ROOTS",
    "INCOMPLETE",
    "INTERRUPTED",
    "NO",
    "OK",
    "TERMINATED",
    "UNAVAILABLE",
    "USAGE",
    "Parser",
    "Terminated",
    "Tool",
    "add_action",
    "add_actions",
    "bounded",
    "build_parser",
    "describe",
    "error_code",
    "main",
    "masked",
    "output_dir",
    "output_file",
    "seconds_up_to",
    "settings_from",
    "termination_held",
    "until_terminated",
]


@dataclass(frozen=True)
class Tool:
    """A sub-command: `configure` is "module:function", imported only when the command is used."""

    name: str
    configure: str
    summary: str


COMMANDS = (
    Tool("serve", "gateway.commands:serve", "run the fencing gateway (HTTP) in front of the object store"),
    Tool("keys", "gateway.commands:keys", "add, list or revoke the gateway's API keys (stored hashed)"),
    Tool("audit", "gateway.commands:audit", "check a gateway's audit trail offline"),
    Tool("upstream", "gateway.commands:upstream", "probe an upstream store's conditional writes"),
    Tool("lock", "fencegate.lock.cli:configure", "inspect a lock on the Redis masters, or force it free"),
    Tool("demo", "fencegate.lab.demo:configure", "start 5 local Redis masters, take a fenced lease, stop"),
    Tool("cluster", "fencegate.lab.cluster.cli:configure", "start, check or stop servers on loopback"),
    Tool("lab", "fencegate.lab.cli:configure", "the safety lab: Redis-only vs fenced on real faults"),
    Tool("bench", "fencegate.bench.cli:configure", "benchmark fencegate against its peers in one run"),
    Tool("model", "fencegate.model.cli:configure", "check the protocol exhaustively with spin"),
    Tool("soak", "fencegate.soak.cli:configure", "the long fault and load suite against 2 gateways"),
    Tool("sql", "fencegate.sql.cli:configure", "install the trigger that fences your table's writers"),
)


def build_parser(load: Sequence[str] | None = None) -> Parser:
    """The whole parser; only the commands named in `load` get their options (all when None)."""
    parser = Parser(
        prog="fencegate",
        top=True,
        description="Redlock leases that carry fencing tokens, a gateway that refuses stale writes, and a "
        "lab that shows the difference on real faults.",
        epilog="examples:\n  fencegate demo\n  fencegate serve --port 8080\n  fencegate lab headline\n"
        "  fencegate serve --help\n\nexit codes (every command): 0 yes, 1 no (a check failed), 2 the "
        "request is wrong, 3 the machine or a service is in the way, 4 not finished; see docs/cli.md",
    )
    parser.add_argument("--version", action=PrintVersion, help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        child = sub.add_parser(command.name, help=command.summary, description=command.summary)
        if load is None or command.name in load:
            _configure(command)(child)
    return parser


def _configure(command: Tool) -> Callable[[argparse.ArgumentParser], None]:
    module, _, function = command.configure.partition(":")
    configure: Callable[[argparse.ArgumentParser], None] = getattr(import_module(module), function)
    return configure


def _command_name(argv: Sequence[str]) -> str | None:
    """The sub-command `argv` names: the first word that is neither a global option nor its value."""
    value_next = False
    for word in argv:
        if value_next:
            value_next = False
        elif word.startswith("-"):
            # --log-level (or a prefix of it, as argparse allows) takes the next word unless given with =
            value_next = len(word) > 2 and "=" not in word and "--log-level".startswith(word)
        else:
            return word if word in {command.name for command in COMMANDS} else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before the command ran (`_main` answers one during it): while loading it
        print("fencegate: interrupted", file=sys.stderr)
        return INTERRUPTED


def _main(argv: list[str]) -> int:
    name = _command_name(argv)
    parser = build_parser(load=() if name is None else (name,))
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command they were given to, not by `fencegate`
        parser.exit(
            USAGE,
            f"{args.prog}: unrecognized arguments: {masked(' '.join(extra))}; see `{args.prog} --help`\n",
        )
    if args.log_level not in LOG_LEVELS:  # a given flag is one of them: this came from the variable
        parser.exit(
            USAGE,
            f"{args.prog}: {ENV_LOG_LEVEL} {args.log_level!r} is not a log level; give one of "
            f"{', '.join(LOG_LEVELS)}, or unset it\n",
        )
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    func = args.func
    if isinstance(func, str):  # "module:function", imported only now that the command runs
        module, _, name = func.partition(":")
        func = getattr(import_module(module), name)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminated) if in_main_thread else None
    try:
        code: int = func(args)
    except KeyboardInterrupt:
        print(f"{args.prog}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Terminated:
        print(f"{args.prog}: terminated", file=sys.stderr)
        return TERMINATED
    except Exception as exc:
        code_of_error = report(args.prog, exc)
        if code_of_error is None:
            raise
        return code_of_error
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return code
