"""`fencegate --help` and every sub-command's help: light to load, defaults and an example shown."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fencegate.cli import COMMANDS, Tool, build_parser, main

# Modules a help screen must not load: the server, the drivers, the tools.
HEAVY = ("aiohttp", "sqlalchemy", "redis", "kazoo", "asyncpg", "lockclient", "storage", "gateway.app",
         "fencegate.lab", "fencegate.bench", "fencegate.model", "fencegate.soak")  # fmt: skip
# ...but for the store's defaults that `serve --help` shows, in modules that import nothing.
LIGHT = ("storage", "storage.limits")


def loaded_by(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter has imported once `fencegate ARGV` printed its help."""
    script = (
        "import sys\nfrom fencegate.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
        "    pass\nprint('\\n'.join(sorted(sys.modules)), file=sys.stderr)"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=60, check=True
    )
    assert "usage: fencegate" in run.stdout
    return set(run.stderr.split())


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["keys", "add", "--help"]])
def test_help_loads_no_server_driver_or_tool(argv: list[str]) -> None:
    modules = loaded_by(argv)
    heavy = sorted(m for m in modules - set(LIGHT) if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == []


def test_only_the_named_command_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    configured: list[str] = []

    def configure(command: Tool) -> Callable[[argparse.ArgumentParser], None]:
        configured.append(command.name)
        return lambda parser: None

    monkeypatch.setattr("fencegate.cli._configure", configure)
    with pytest.raises(SystemExit):
        main(["--log-level", "WARNING", "model", "--help"])
    assert configured == ["model"]


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """`parser` and every sub-parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from parsers(child)


ALL = list(parsers(build_parser()))


@pytest.mark.parametrize("parser", ALL, ids=[p.prog for p in ALL])
def test_every_help_shows_an_example_and_every_default(parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    assert "example" in text, f"{parser.prog} --help shows no example"
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        takes_value = action.nargs != 0 and (action.option_strings or action.nargs in ("?", "*"))
        if takes_value and not action.required:
            formatter = parser._get_formatter()
            shown = formatter._expand_help(action)  # the help text as printed
            assert "default" in shown, f"{parser.prog} {action.option_strings}: no default in {shown!r}"


def test_every_command_is_listed_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["--help"])
    assert exit.value.code == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command.name in out
    assert "exit codes" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.startswith("fencegate ")


@pytest.mark.parametrize(
    "argv",
    [["--log-level", "DEBUG", "cluster", "status"], ["cluster", "--log-level", "DEBUG", "status"],
     ["cluster", "status", "--log-level", "DEBUG"]],
)  # fmt: skip
def test_global_options_are_taken_before_or_after_the_sub_command(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).log_level == "DEBUG"


def test_a_global_option_given_first_is_kept_when_the_sub_command_does_not_repeat_it() -> None:
    assert build_parser().parse_args(["--log-level", "ERROR", "keys", "list"]).log_level == "ERROR"
    assert build_parser().parse_args(["keys", "list"]).log_level == "INFO"


def test_keys_take_the_file_before_or_after_the_action() -> None:
    before = build_parser().parse_args(["keys", "--file", "a.json", "add", "x", "--prefix", "p/"])
    after = build_parser().parse_args(["keys", "add", "x", "--prefix", "p/", "--file", "b.json"])
    assert (before.file, after.file) == ("a.json", "b.json")


def help_examples() -> list[tuple[str, list[str]]]:
    """(the parser's prog, the words after `fencegate`) of every example line of every `--help`."""
    found = []
    for parser in ALL:
        for line in (parser.epilog or "").splitlines():
            words = shlex.split(line.strip())
            if words[:1] == ["fencegate"]:
                cut = next((i for i, w in enumerate(words) if w in (">", "|")), len(words))
                found.append((parser.prog, words[1:cut]))
    return found


EXAMPLES = help_examples()


@pytest.mark.parametrize(("prog", "argv"), EXAMPLES, ids=[" ".join(argv) for _, argv in EXAMPLES])
def test_every_help_example_parses_as_written(
    prog: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the output paths of the examples are checked where they would be written
    try:
        build_parser().parse_args(argv)
    except SystemExit as exit:
        if exit.code == 0:  # an example of --help itself
            return
        pytest.fail(f"{prog} --help: `fencegate {' '.join(argv)}` does not parse (exit {exit.code})")


def test_the_lab_shows_where_the_histories_its_report_reads_come_from() -> None:
    lab = [argv for prog, argv in EXAMPLES if prog == "fencegate lab"]
    workdir = next(argv[argv.index("--workdir") + 1] for argv in lab if "--workdir" in argv)
    (report,) = [argv for argv in lab if argv[:2] == ["lab", "report"]]
    assert report[2] == f"{workdir}/runs/*/history.jsonl"
