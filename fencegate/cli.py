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
(an error that carries detail, such as the last lines of a server's log,
shows them indented below it):
an error whose class derives from `ValueError` is the user's input (2), any
other error of a package root in `ERROR_ROOTS` is the world's (3). Anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from importlib import import_module, metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

OK, NO, USAGE, UNAVAILABLE, INCOMPLETE = 0, 1, 2, 3, 4
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
TERMINATED = 143  # 128 + SIGTERM


class Terminated(BaseException):
    """SIGTERM, raised wherever the command is, so every `finally` and `with` on the way out runs: the
    servers a command started are stopped as on Ctrl-C. (A command running an event loop may take
    SIGTERM over with `loop.add_signal_handler` meanwhile.)"""


_held = 0  # how many `termination_held` blocks are running
_pending = False  # a SIGTERM arrived inside one


def _terminated(_signum: int, _frame: object) -> None:
    global _pending
    if _held:
        _pending = True
        return
    raise Terminated


@contextlib.contextmanager
def termination_held() -> Iterator[None]:
    """Hold a SIGTERM that arrives inside the block until the block ends: for a step that must not be
    cut in half, such as a server started but not yet recorded for whoever stops the cluster."""
    global _held, _pending
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending:
            _pending = False
            raise Terminated


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
ENV_LOG_LEVEL = "FENCEGATE_LOG_LEVEL"  # --log-level's variable, as every serve option has one
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


SettingsT = TypeVar("SettingsT", bound="DataclassInstance")


@dataclass(frozen=True)
class Command:
    """A sub-command: `configure` is "module:function", imported only when the command is used."""

    name: str
    configure: str
    summary: str


COMMANDS = (
    Command("serve", "gateway.commands:serve", "run the fencing gateway (HTTP) in front of the object store"),
    Command("keys", "gateway.commands:keys", "add, list or revoke the gateway's API keys (stored hashed)"),
    Command("audit", "gateway.commands:audit", "check a gateway's audit trail offline"),
    Command("upstream", "gateway.commands:upstream", "probe an upstream store's conditional writes"),
    Command("lock", "fencegate.lock.cli:configure", "inspect a lock on the Redis masters, or force it free"),
    Command("demo", "fencegate.lab.demo:configure", "start 5 local Redis masters, take a fenced lease, stop"),
    Command("cluster", "fencegate.lab.cluster.cli:configure", "start, check or stop servers on loopback"),
    Command("lab", "fencegate.lab.cli:configure", "the safety lab: Redis-only vs fenced on real faults"),
    Command("bench", "fencegate.bench.cli:configure", "benchmark fencegate against its peers in one run"),
    Command("model", "fencegate.model.cli:configure", "check the protocol exhaustively with spin"),
    Command("soak", "fencegate.soak.cli:configure", "the long fault and load suite against 2 gateways"),
    Command("sql", "fencegate.sql.cli:configure", "install the trigger that fences your table's writers"),
)


class HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default, and keeps the line breaks of descriptions and examples."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, [], argparse.SUPPRESS)
        takes_value = action.option_strings or action.nargs in ("?", "*")
        if shown and takes_value and "%(default)" not in text and "default" not in text:
            text += " (default: %(default)s)"
        return text

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        # A paragraph is wrapped; an indented line (an example, a table row) is kept as written.
        out: list[str] = []
        for paragraph in text.strip("\n").split("\n\n"):
            lines = paragraph.splitlines()
            if any(line.startswith(" ") for line in lines):
                out.append("\n".join(indent + line for line in lines))
            else:
                out.append(super()._fill_text(" ".join(lines), width, indent))
        return "\n\n".join(out)


class Parser(argparse.ArgumentParser):
    """A parser whose every level takes the global options, so they may follow a sub-command too.

    Sub-parsers are made of this class as well (argparse creates them with
    `type(parent)`). Below the top, the global options default to SUPPRESS, so
    a value given earlier on the command line is kept when they are not given again.
    """

    def __init__(self, *args: Any, top: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.add_argument(
            "--log-level",
            choices=LOG_LEVELS,
            # argparse checks no default against `choices`: main refuses a bad variable
            default=(os.environ.get(ENV_LOG_LEVEL) or "INFO") if top else argparse.SUPPRESS,
            help=f"how much to log on stderr (env {ENV_LOG_LEVEL}; a flag wins)"
            + ("" if top else " (default: INFO)"),
        )
        self.set_defaults(prog=self.prog)

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads; this passes both through
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._words = list(sys.argv[1:] if args is None else args)  # for `error`: what this level was given
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """A mistake on the command line: one line, and the help that shows the right form.

        argparse checks a missing sub-command before it reports an unknown option, so `fencegate --frob`
        would read "required: COMMAND": the unknown option is the mistake to name.
        """
        unknown = [word for word in getattr(self, "_words", ()) if self._unknown_option(word)]
        if unknown and message.startswith("the following arguments are required"):
            message = f"unrecognized arguments: {' '.join(unknown)}"
        self.exit(USAGE, f"{self.prog}: {masked(message)}; see `{self.prog} --help`\n")

    def _unknown_option(self, word: str) -> bool:
        if not word.startswith("-") or word == "--" or word[1:2].isdigit():  # a value, -1 included
            return False
        name = word.partition("=")[0]
        # argparse takes an unambiguous prefix of a long option (`--log` for `--log-level`)
        known = (option for action in self._actions for option in action.option_strings)
        return not any(
            option == name or (name.startswith("--") and option.startswith(name)) for option in known
        )


# -- for each command's configure(parser): one way to describe a command, its actions and its examples


def describe(parser: argparse.ArgumentParser, description: str, *examples: str) -> None:
    """A command's description and its examples, as every `--help` ends."""
    parser.description = description
    parser.epilog = _examples(examples)


def add_actions(
    parser: argparse.ArgumentParser, *, dest: str = "action", metavar: str = "ACTION"
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The actions of a command (`fencegate cluster up|down|...`): one of them is required."""
    return parser.add_subparsers(dest=dest, required=True, metavar=metavar)


def add_action(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    run: Callable[[argparse.Namespace], int],
    *examples: str,
    help: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """An action that runs `run(args)`, with its one-line help, its description and its examples."""
    parser = actions.add_parser(name, help=help, description=description)
    parser.epilog = _examples(examples)
    parser.set_defaults(func=run)
    return parser


def settings_from(cls: type[SettingsT], args: argparse.Namespace) -> SettingsT:
    """`cls(field=args.field, ...)` for every field of the dataclass `cls` that the command line has an
    option for (same name); the others keep their defaults."""
    return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)})


# -- argument types: a value the command could not use is refused as it is parsed, before anything starts,
# in the parser's one line (`fencegate lab run: argument --ops: 0: give 1 or more`) with exit code 2


def bounded(maximum: int, *, minimum: int = 1) -> Callable[[str], int]:
    """A count from `minimum` to `maximum`: of processes, servers or steps, where a number past what
    this machine could run would start work that never ends (and hold every server it started). Say
    the bound in the option's help: `(1 to 64)`."""

    def parse(text: str) -> int:
        return _whole_number(text, minimum=minimum, maximum=maximum)

    parse.__name__ = f"count from {minimum} to {maximum}"
    return parse


def _whole_number(text: str, *, minimum: int, maximum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value}: give {minimum} or more")
    if maximum is not None and value > maximum:
        raise argparse.ArgumentTypeError(f"{value}: give at most {maximum}")
    return value


def seconds_up_to(maximum: float, *, positive: bool = True) -> Callable[[str], float]:
    """A duration of at most `maximum` seconds (above 0, or 0 or more when not `positive`): for a run
    that holds servers until it ends, where `1e12` would never end. Say the bound in the option's help:
    `(above 0, at most 604800: a week)`."""

    def parse(text: str) -> float:
        value = _seconds(text, positive=positive)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{text}: give at most {maximum:g} seconds")
        return value

    parse.__name__ = f"seconds up to {maximum:g}"
    return parse


def _seconds(text: str, *, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
        raise argparse.ArgumentTypeError(
            f"{text}: give a number of seconds {'above 0' if positive else '(0 or more)'}"
        )
    return value


def output_dir(text: str) -> Path:
    """A directory a command writes into, made if missing. Checked as it is parsed, so a long run is not
    lost at its end to a path it cannot write; nothing is created."""
    path = Path(text)
    _check_writable_dir(path, given=path)
    return path


def output_file(text: str) -> Path:
    """A file a command writes, its directory made if missing; checked as `output_dir` is."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{path} is a directory; give a file name, e.g. {path / 'report.html'}"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{path} is not writable; give a file you can write")
    _check_writable_dir(path.parent, given=path)
    return path


def _check_writable_dir(path: Path, *, given: Path) -> None:
    """Refuse `path` unless it is a directory that can be written, or one that can be made."""
    existing = next((p for p in (path, *path.parents) if os.path.lexists(p)), Path("."))
    if not existing.is_dir():
        if existing == given:
            raise argparse.ArgumentTypeError(f"{given} is not a directory; give a new or existing directory")
        raise argparse.ArgumentTypeError(
            f"{given}: {existing} is not a directory; give a path under a directory"
        )
    # Tried for real: root passes every permission check, yet cannot write under /proc or a read-only mount.
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".fencegate-probe-", dir=existing))
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"{given}: cannot create files in {existing} ({exc.strerror}); give a path under a directory "
            "you can write"
        ) from None


def _examples(examples: Sequence[str]) -> str:
    return ("example:" if len(examples) == 1 else "examples:") + "".join(f"\n  {line}" for line in examples)


class _Version(argparse.Action):
    """`--version`: read from the installed distribution only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"fencegate {metadata.version('fencegate')}")
        parser.exit()


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
    parser.add_argument("--version", action=_Version, help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        child = sub.add_parser(command.name, help=command.summary, description=command.summary)
        if load is None or command.name in load:
            _configure(command)(child)
    return parser


def _configure(command: Command) -> Callable[[argparse.ArgumentParser], None]:
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
    previous = signal.signal(signal.SIGTERM, _terminated) if in_main_thread else None
    try:
        code: int = func(args)
    except KeyboardInterrupt:
        print(f"{args.prog}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Terminated:
        print(f"{args.prog}: terminated", file=sys.stderr)
        return TERMINATED
    except Exception as exc:
        code_of_error = error_code(exc)
        if code_of_error is None:
            raise
        first, *rest = str(exc).splitlines() or [type(exc).__name__]
        print(f"{args.prog}: {first}", file=sys.stderr)
        for line in rest[-DETAIL_LINES:]:  # a server's log tail, a compiler's output: indented below
            print(f"  {line}", file=sys.stderr)
        return code_of_error
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return code


if __name__ == "__main__":
    # `python -m fencegate.cli` runs this file as `__main__`, a second copy of the module: run the one
    # the commands import, so SIGTERM's handler and `termination_held` share one state and one class
    from fencegate.cli import main as imported_main

    sys.exit(imported_main())
