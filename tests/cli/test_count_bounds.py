"""Counts and durations of `soak`, `model check` and `cluster check` are bounded: refused as parsed.

A value past a bound is one line naming the option and the bound, exit 2,
before anything starts. The soak runs with no `wrk` on PATH, so a bound that
is not checked as the value is parsed ends at the wrk check (exit 3) instead
of starting a cluster; `model check` is narrowed to one small search for the
same reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fencegate.cli import USAGE, build_parser, main
from tests.cli.test_errors import fencegate, files_under

HUGE = "99999999999999999999999"
SEE_SOAK = "see `fencegate soak --help`"
SEE_MODEL = "see `fencegate model check --help`"
ONE_SEARCH = ("--variant", "fence-only", "--property", "mark")  # a second's search, should one start

# option, smallest, largest
SOAK_COUNTS = [
    ("--clients", 1, 32),
    ("--resources", 1, 1024),
    ("--writers", 1, 64),
    ("--in-flight", 1, 64),
    ("--schemathesis-examples", 1, 10_000),
    ("--raw-examples", 1, 100_000),
]
# option, smallest, largest, how --help says it
SOAK_SECONDS = [
    ("--duration", 0.001, 604_800, "(above 0, at most 604800: a week)"),
    ("--outage", 0.001, 3600, "(above 0, at most 3600: an hour)"),
    ("--bench-seconds", 0, 3600, "(0 to 3600; 0: skip it)"),
]
# option, smallest, largest, why the model stops there (None: the bound alone)
MODEL_SIZES = [
    ("--clients", 1, 3, "the model is sized for 1 to 3 clients"),
    ("--nodes", 1, 5, "use 1, 3 or 5 Redis masters"),
    ("--ops", 1, 3, "the model is sized for 1 to 3 acquisitions per client"),
    ("--pauses", 0, 3, "the model is sized for 0 to 3 pauses"),
    ("--node-faults", 0, 3, "the model is sized for 0 to 3 node faults"),
    ("--max-depth", 1, 1_000_000, None),
    ("--memory", 256, 65_536, None),
]


def _no_wrk(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "bin"
    empty.mkdir()
    return {"PATH": str(empty)}


@pytest.mark.parametrize(
    ("option", "value", "bound"),
    [*((option, str(largest + 1), largest) for option, _, largest in SOAK_COUNTS),
     ("--clients", HUGE, 32)],
)  # fmt: skip
def test_soak_refuses_a_count_past_its_bound(tmp_path: Path, option: str, value: str, bound: int) -> None:
    env = _no_wrk(tmp_path)
    before = files_under(tmp_path)
    code, err = fencegate("soak", option, value, cwd=tmp_path, env=env)
    said = f"fencegate soak: argument {option}: {value}: give at most {bound}; {SEE_SOAK}"
    assert (code, err) == (USAGE, [said])
    assert files_under(tmp_path) == before  # no state dir, no server


@pytest.mark.parametrize(
    ("option", "value", "bound"),
    [("--duration", "604801", "604800"), ("--duration", "1e12", "604800"), ("--outage", "3601", "3600"),
     ("--bench-seconds", "3600.5", "3600")],
)  # fmt: skip
def test_soak_refuses_a_duration_past_its_bound(tmp_path: Path, option: str, value: str, bound: str) -> None:
    env = _no_wrk(tmp_path)
    before = files_under(tmp_path)
    code, err = fencegate("soak", option, value, cwd=tmp_path, env=env)
    assert (code, err) == (
        USAGE, [f"fencegate soak: argument {option}: {value}: give at most {bound} seconds; {SEE_SOAK}"]
    )  # fmt: skip
    assert files_under(tmp_path) == before


def _model_cases() -> list[tuple[str, str, str]]:
    """(option, value, the parser's reason) below and above every size, and far above pan's bounds."""
    cases = []
    for option, smallest, largest, why in MODEL_SIZES:
        because = "" if why is None else f" ({why})"
        cases.append((option, str(smallest - 1), f"{smallest - 1}: give {smallest} or more{because}"))
        cases.append((option, str(largest + 1), f"{largest + 1}: give at most {largest}{because}"))
    cases += [(option, HUGE, f"{HUGE}: give at most {largest}")
              for option, _, largest, _ in MODEL_SIZES if option in ("--max-depth", "--memory")]  # fmt: skip
    return cases


@pytest.mark.parametrize(("option", "value", "reason"), _model_cases())
def test_model_check_refuses_a_size_out_of_its_bounds(
    tmp_path: Path, option: str, value: str, reason: str
) -> None:
    code, err = fencegate("model", "check", *ONE_SEARCH, option, value, cwd=tmp_path)
    assert (code, err) == (USAGE, [f"fencegate model check: argument {option}: {reason}; {SEE_MODEL}"])
    assert files_under(tmp_path) == set()


def _help(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # as one line: the wrapping is the terminal's


def test_soak_accepts_the_edges_of_each_bound_and_its_help_says_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser(load=("soak",))
    for edge in (0, 1):  # the smallest, then the largest, of every option at once
        argv = [word for option, *edges, _ in SOAK_SECONDS for word in (option, str(edges[edge]))]
        argv += [word for option, *edges in SOAK_COUNTS for word in (option, str(edges[edge]))]
        args = parser.parse_args(["soak", *argv])
        for option, value in zip(argv[::2], argv[1::2], strict=True):
            assert getattr(args, option[2:].replace("-", "_")) == float(value), option
    shown = _help(capsys, "soak")
    for option, _, largest in SOAK_COUNTS:
        assert f"(1 to {largest}) (default: " in shown, option
    for option, _, _, said in SOAK_SECONDS:
        assert f"{said} (default: " in shown, option


def test_model_check_accepts_the_edges_of_each_bound_and_its_help_says_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser(load=("model",))
    for edge in (0, 1):  # the smallest, then the largest, of every option at once
        argv = [word for option, *edges, _ in MODEL_SIZES for word in (option, str(edges[edge]))]
        args = parser.parse_args(["model", "check", *argv])
        for option, value in zip(argv[::2], argv[1::2], strict=True):
            assert getattr(args, option[2:].replace("-", "_")) == int(value), option
    shown = _help(capsys, "model", "check")
    for option, smallest, largest, _ in MODEL_SIZES:
        said = "(1, 3 or 5)" if option == "--nodes" else f"({smallest} to {largest})"
        assert f"{said} (default: " in shown, option


@pytest.mark.parametrize("value", ["86400.5", "1e12"])
def test_cluster_check_refuses_a_load_longer_than_a_day(tmp_path: Path, value: str) -> None:
    """It would hold its workers and clients (and the cluster's servers busy) until it ends."""
    before = files_under(tmp_path)
    code, err = fencegate(
        "cluster", "check", "--dir", str(tmp_path / "none"), "--seconds", value, cwd=tmp_path
    )
    see = "see `fencegate cluster check --help`"
    assert (code, err) == (
        USAGE,
        [f"fencegate cluster check: argument --seconds: {value}: give at most 86400 seconds; {see}"],
    )
    assert files_under(tmp_path) == before
