"""`fencegate model check`: output formats, exit status and refusals of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencegate.cli import main
from fencegate.model.cli import exit_code
from fencegate.model.pan import PanReport
from fencegate.model.runner import CheckResult
from fencegate.model.variants import Sizes


def test_check_prints_json_with_a_verdict_per_variant(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["model", "check", "--variant", "fence-only", "--nodes", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["verdicts"] == {"fence-only": "safe"}
    assert out["sizes"]["nodes"] == 1
    assert {r["property"] for r in out["results"]} == {"interleave", "lost-update", "mark", "grant-order"}
    assert all(r["states"] > 0 and r["trail"] is None for r in out["results"])


def test_check_writes_counterexamples_as_lab_history_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["model", "check", "--variant", "redis-only", "--property", "lost-update", "--history-dir",
         str(tmp_path), "--markdown"]
    )  # fmt: skip
    table = capsys.readouterr().out
    assert code == 0  # redis-only is the baseline: its violations are the point, not a failure
    assert "| `redis-only` | **violated**" in table
    lines = (tmp_path / "redis-only-lost-update.jsonl").read_text().splitlines()
    header, *events = (json.loads(line) for line in lines)
    assert header["history"] == 1
    assert header["meta"]["mode"] == "redis-only"
    acknowledged = sum(1 for e in events if e["kind"] == "write" and e["outcome"] == "ok")
    assert header["final"] < acknowledged


def test_check_draws_counterexamples_as_the_labs_timeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "model.html"
    code = main(
        ["model", "check", "--variant", "redis-only", "--property", "interleave", "--nodes", "1",
         "--report", str(report)]
    )  # fmt: skip
    assert code == 0
    assert f"report: {report}" in capsys.readouterr().err
    page = report.read_text()
    assert page.count('<section id="run-') == 1
    assert "<svg" in page
    assert "redis-only" in page


def test_violations_of_a_design_fencegate_does_not_ship_leave_the_exit_status_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["model", "check", "--variant", "split-fence", "--property", "mark"]) == 0
    assert "split-fence: unsafe" in capsys.readouterr().out


def test_the_gateway_fencing_only_the_named_resource_is_drawn_unsafe_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    img = tmp_path / "img"
    argv = [
        "--variant",
        "any-resource",
        "--property",
        "lost-update",
        "--nodes",
        "1",
        "--trails",
        "--svg",
        str(img),
    ]
    code = main(["model", "check", *argv])
    out = capsys.readouterr().out
    assert code == 0  # it shows the hole the bound resource closes; it is not what fencegate ships
    assert "any-resource: unsafe" in out
    assert "any-resource / lost-update: final counter 1, acknowledged increments 2" in out
    assert "names resource key" in out
    assert "names resource lock" in out
    assert [p.name for p in img.iterdir()] == ["model-any-resource-lost-update.svg"]
    assert (img / "model-any-resource-lost-update.svg").read_text().startswith("<svg")


def _result(variant: str, prop: str, verdict: str) -> CheckResult:
    report = PanReport(
        states=1, transitions=1, depth=1, errors=int(verdict == "violated"), memory_mb=1.0, seconds=0.0,
        vector_bytes=1, complete=verdict != "incomplete", first_error=None, limit=None,
    )  # fmt: skip
    return CheckResult(variant, prop, Sizes(), verdict, report, 0.0, 0.0, None)


def test_exit_status_is_1_when_a_shipped_design_breaks_a_promise_and_4_when_a_search_is_cut() -> None:
    assert exit_code([_result("fenced", "interleave", "violated")]) == 1
    assert exit_code([_result("fence-only", "lost-update", "violated")]) == 1
    assert exit_code([_result("bound-resource", "interleave", "violated")]) == 1
    assert exit_code([_result("any-resource", "lost-update", "violated")]) == 0
    assert exit_code([_result("fenced", "grant-order", "violated")]) == 0  # not promised
    assert exit_code([_result("redis-only", "interleave", "violated")]) == 0
    assert exit_code([_result("fenced", "mark", "incomplete")]) == 4


def test_a_search_cut_by_the_depth_bound_is_reported_incomplete_never_a_proof(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["model", "check", "--variant", "fence-only", "--property", "mark", "--max-depth", "50"])
    out = capsys.readouterr().out
    assert code == 4
    assert "fence-only: incomplete" in out
    assert "depth bound reached: raise --max-depth" in out
    assert " 49 " in out  # the depth reached is printed, so the cut is visible


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "2"], "use 1, 3 or 5"),
        (["--clients", "4"], "1 to 3 clients"),
        (["--variant", "paxos"], "unknown variant"),
        (["--property", "liveness"], "unknown property"),
        (["--max-depth", "0"], "--max-depth"),
        (["--variant", "fenced", "--property", "store-order"], "theirs: interleave, lost-update"),
        (["--variant", "proxy-conditional", "--property", "mark"], "theirs: store-order, no-recreate"),
    ],
)
def test_check_refuses_bad_input_with_the_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status: int | str | None
    try:
        status = main(["model", "check", *argv])
    except SystemExit as parsed:  # refused by the parser itself, as it read the option
        status = parsed.code
    assert status == 2
    assert message in capsys.readouterr().err
