"""The parser every level of `fencegate` is made of: global options anywhere, defaults shown, one-line
mistakes.

argparse makes sub-parsers with `type(parent)`, so each command's and
action's parser is a `Parser` too, and a mistake anywhere is told the same
way: one line, URLs masked, the help to read, exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from fencegate.cli.errors import USAGE, masked

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
ENV_LOG_LEVEL = "FENCEGATE_LOG_LEVEL"  # --log-level's variable, as every serve option has one


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


class PrintVersion(argparse.Action):
    """`--version`: read from the installed distribution only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib import metadata  # email, zipfile, csv and inspect: a help screen needs none of them

        print(f"fencegate {metadata.version('fencegate')}")
        parser.exit()
