"""The fault and load suite in its CI form: short, every fault once, every bad-input source.

`make soak` runs the same code longer (`fencegate soak`); this run keeps to
well under a minute of load and fuzzing and asserts what the full run's
table prints: every PostgreSQL process paused by the pause fault, the leased
clients and the unleased writers both making progress, writes retried and
each applied once with one answer, nothing acknowledged lost, no invariant
violated, no 5xx on bad input, no refused request that changed storage. The
rates are printed, not held to the goal.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from fencegate.cli import main
from fencegate.soak.load import SoakConfig
from fencegate.soak.run import soak

# Five faults in 14 s leave little unfaulted time: the rate goal is the full run's (`make soak`), and
# here the ratio would measure how busy the machine is, not the code (tests/soak/test_report.py holds
# the goal to the verdict).
SHORT = SoakConfig(
    duration=14.0, clients=4, resources=3, ttl=3.0, outage=1.5, bench_seconds=2.0, rate_goal=0.0
)


async def test_short_soak_loses_nothing_and_violates_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.ERROR, logger="kazoo")
    report = await soak(SHORT, tmp_path, schemathesis_examples=5, raw_examples=60)
    with capsys.disabled():
        print("\n" + report.table())
    assert [" ".join(f.what.split()[:2]) for f in report.load.faults] == [
        "kill -9", "PostgreSQL stopped", "PostgreSQL SIGSTOPped", "SIGSTOP redis-0", "ZooKeeper restarted"
    ]  # fmt: skip
    paused = re.search(r"(\d+) of (\d+) processes stopped, in (\d+) sessions", report.load.faults[2].what)
    assert paused is not None, report.load.faults[2].what
    stopped, listed, sessions = map(int, paused.groups())
    assert stopped == listed > 1, "every PostgreSQL process is stopped, not only the postmaster"
    assert sessions > 1, "the backends run in sessions of their own"
    accepted = [c for c in report.load.history.calls if c.method == "PUT" and c.status in (200, 201)]
    assert accepted, "the leased load made no progress"
    assert report.verdict.unleased_acked > 0, "the unleased writers made no progress"
    assert report.verdict.retries.writes > 0, "no write needed a retry: the faults missed the load"
    assert report.verdict.retries.applied_twice == []
    assert report.verdict.retries.answers_differ == []
    assert report.load.bench_rate is not None
    assert report.load.bench_rate > 0
    assert report.verdict.fault_rate > 0
    data = json.loads(json.dumps(report.json()))  # what `fencegate soak --json` prints
    assert data["fault_to_bench_ratio"] == round(report.verdict.fault_rate / report.load.bench_rate, 3)
    assert data["bench_non_2xx"] == 0
    assert data["verdict"] == "PASS"
    assert report.verdict.lost == 0
    assert report.verdict.violations == []
    assert report.load.audit.ok, report.load.audit.violations
    assert report.bad.tried["schemathesis"] > 0
    assert report.bad.tried["raw fuzzer"] == 60
    assert report.bad.server_errors == []
    assert report.bad.changed == []


def test_a_state_dir_of_someone_elses_files_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A soak empties its state directory first: only a new, empty or earlier soak's one is taken."""
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    assert main(["soak", "--state-dir", str(mine), "--bench-seconds", "0"]) == 2
    assert "holds files a soak did not write" in capsys.readouterr().err
    assert (mine / "notes.txt").read_text() == "precious"
