"""The model and the lab's checker agree: a spin counterexample is a violation to the checker too.

Each trail is written as a lab history file (what `fencegate model check
--history-dir` writes), loaded by the lab's own reader and judged by the
lab's own checker, which must find the violation the model found: the
redis-only trails, the resource trails, whose DELETEs the lab's format
carries as marks on a client's lane, and the unconditional proxy's held write.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencegate.lab.checker import check
from fencegate.lab.history import History
from fencegate.lab.report import RunResult
from fencegate.lab.timeline import write_svg
from fencegate.model.report import history_lines
from fencegate.model.runner import CheckResult
from tests.model.conftest import counterexample


def _as_lab_history(result: CheckResult, tmp_path: Path) -> History:
    path = tmp_path / f"{result.variant}-{result.prop}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in history_lines(result)))
    return History.load(path)


def test_the_checker_counts_the_models_interleaving(
    by_key: dict[tuple[str, str], CheckResult], tmp_path: Path
) -> None:
    result = by_key[("redis-only", "interleave")]
    assert result.verdict == "violated"
    verdict = check(_as_lab_history(result, tmp_path))
    assert verdict.interleaved_leases >= 1


def test_the_checker_counts_the_models_lost_update(
    by_key: dict[tuple[str, str], CheckResult], tmp_path: Path
) -> None:
    result = by_key[("redis-only", "lost-update")]
    trail = counterexample(result)
    verdict = check(_as_lab_history(result, tmp_path))
    assert verdict.lost_updates == trail.acknowledged - trail.final >= 1


@pytest.mark.parametrize("variant", ["any-resource", "bound-on-create", "bound-until-delete"])
def test_the_checker_counts_the_lost_update_of_a_key_fenced_by_the_wrong_resource(
    by_key: dict[tuple[str, str], CheckResult], tmp_path: Path, variant: str
) -> None:
    result = by_key[(variant, "lost-update")]
    assert result.trail is not None
    history = _as_lab_history(result, tmp_path)
    deletes = [e for e in result.trail.events if e["kind"] == "delete" and e["outcome"] != "sent"]
    marks = [e for e in history.events if e.kind == "fault" and e.detail.startswith("DELETE")]
    assert len(marks) == len(deletes)
    assert deletes or variant != "bound-until-delete"  # its counterexample needs the DELETE
    verdict = check(history)
    assert verdict.lost_updates == result.trail.acknowledged - result.trail.final >= 1
    assert verdict.interleaved_leases >= 1


def test_the_checker_sees_the_unconditional_proxys_held_write_as_an_interleaving(
    by_key: dict[tuple[str, str], CheckResult], tmp_path: Path
) -> None:
    result = by_key[("proxy-trust-path", "store-order")]
    counterexample(result)
    assert check(_as_lab_history(result, tmp_path)).interleaved_leases >= 1


@pytest.mark.parametrize(
    ("variant", "prop"),
    [("proxy-trust-path", "acked-durable"), ("proxy-no-tombstone", "no-recreate"),
     ("proxy-blind-delete", "store-order"), ("proxy-bare-tombstone", "no-recreate")],
)  # fmt: skip
def test_every_proxy_counterexample_is_a_history_the_lab_can_draw(
    by_key: dict[tuple[str, str], CheckResult], tmp_path: Path, variant: str, prop: str
) -> None:
    history = _as_lab_history(by_key[(variant, prop)], tmp_path)
    run = RunResult.of(history)
    assert write_svg(run, tmp_path / "run.svg").read_text().startswith("<svg")


def test_the_checker_counts_the_increment_the_conditional_proxy_loses_under_the_labs_workload(
    by_key: dict[tuple[str, str], CheckResult], tmp_path: Path
) -> None:
    result = by_key[("proxy-increments", "increments")]
    trail = counterexample(result)
    verdict = check(_as_lab_history(result, tmp_path))
    assert verdict.lost_updates == trail.increments - trail.value >= 1
    assert verdict.interleaved_leases >= 1  # the older write accepted after the newer fenced read
