"""Tables in Markdown files regenerated from the command that produced them.

A block looks like this, and everything between the two markers is the
output of `fencegate model check ARGS --markdown`:

    <!-- model-table: --variant all --clients 2 --nodes 3 -->
    ...
    <!-- /model-table -->

so the doc never holds a number typed by hand, and `fencegate model doc
--check` fails when the doc and a fresh run disagree.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

_BLOCK = re.compile(
    r"(?P<open><!-- model-table: (?P<args>[^>]*?) -->\n)(?P<body>.*?)(?P<close><!-- /model-table -->)",
    re.S,
)


def block_args(text: str) -> list[list[str]]:
    """The argument lists of every block, in order."""
    return [shlex.split(m["args"]) for m in _BLOCK.finditer(text)]


def regenerate(text: str, render: Callable[[list[str]], str], *, only: Callable[[list[str]], bool]) -> str:
    """The text with each selected block's body replaced by `render(args)`."""

    def replace(match: re.Match[str]) -> str:
        args = shlex.split(match["args"])
        if not only(args):
            return match.group(0)
        return match["open"] + render(args).rstrip("\n") + "\n" + match["close"]

    return _BLOCK.sub(replace, text)


__all__ = ["block_args", "regenerate"]
