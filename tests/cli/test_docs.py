"""Every `fencegate ...` command line in README.md and docs/ is parsed by the real command line.

Lines of shell code blocks are examples a user copies: each must parse as
written. An inline `fencegate ...` in prose may name a command without its
required options (`fencegate lab run`), and may be a synopsis: `[...]` is
tried with and without its content, `add/list` (sub-command names) one by one, and
`ARGS` or a trailing `...` stand for what the reader fills in.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import re
import shlex
from pathlib import Path

import pytest

from fencegate.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(\w*)\n(.*?)```", re.S)
SHELL = {"", "sh", "bash", "console", "shell"}
SPAN = re.compile(r"`(fencegate [a-z][^`]*)`")
LINE = re.compile(r"^(?:\$ )?(?:\w+=\S* )*(?:\S*/)?fencegate [a-z].*")
SHELL_ENDS = {"|", ">", ">>", "&&", ";", "2>&1", "&"}


def examples(text: str) -> list[tuple[str, bool]]:
    """(command line, whether it must be complete) for every fencegate command line on a page."""
    found = []
    for language, body in BLOCK.findall(text):
        if language in SHELL:
            for line in body.replace("\\\n", " ").splitlines():
                if LINE.match(line.strip()):
                    found.append((line.strip(), True))
    for span in SPAN.findall(BLOCK.sub("", text)):
        found.append((" ".join(span.split()), False))
    return found


def _actions(parser: argparse.ArgumentParser) -> set[str]:
    """The name of every sub-command and action, at any depth."""
    names: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                names |= {name, *_actions(child)}
    return names


ACTIONS = _actions(build_parser())


def argvs(line: str) -> list[list[str]]:
    """The argument lists a line stands for (after `fencegate`, up to a pipe or a redirection)."""
    variants = {re.sub(r"\[[^\]]*\]", "", line), line.replace("[", "").replace("]", "")}
    out = []
    for variant in sorted(variants):
        words = shlex.split(variant, comments=True)
        words = words[next(i for i, w in enumerate(words) if w.endswith("fencegate")) + 1 :]
        cut = next((i for i, w in enumerate(words) if w in SHELL_ENDS), len(words))
        words = [w.removesuffix("...") for w in words[:cut] if w != "ARGS"]
        choices = [w.split("/") if set(w.split("/")) <= ACTIONS else [w] for w in words]
        out += [list(argv) for argv in itertools.product(*choices)]
    return out


CASES = [(page.name, line, complete) for page in PAGES for line, complete in examples(page.read_text())]


def test_the_pages_have_command_lines_to_check() -> None:
    assert len(CASES) > 60
    assert {"README.md", "security.md", "gateway.md", "lab.md", "model.md"} <= {page for page, _, _ in CASES}


@pytest.mark.parametrize(("page", "line", "complete"), CASES, ids=[f"{p}: {line}" for p, line, _ in CASES])
def test_every_command_line_in_the_docs_parses(page: str, line: str, complete: bool) -> None:
    for argv in argvs(line):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                build_parser().parse_args(argv)
            except SystemExit as exit:
                if exit.code == 0:  # --help, --version
                    continue
                message = err.getvalue().strip()
                if complete or "the following arguments are required" not in message:
                    pytest.fail(f"{page}: `fencegate {' '.join(argv)}` does not parse: {message}")
