"""The fault and load suite in its CI form: short, every fault once, every bad-input source.

`make soak` runs the same code longer (`fencegate soak`); this run keeps to
well under a minute of load and fuzzing and asserts what the full run's
table prints: nothing acknowledged lost, no invariant violated, no 5xx on bad
input, no refused request that changed storage.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fencegate.soak.load import SoakConfig
from fencegate.soak.run import soak

SHORT = SoakConfig(duration=14.0, clients=4, resources=3, ttl=3.0, outage=1.5)


async def test_short_soak_loses_nothing_and_violates_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.ERROR, logger="kazoo")
    report = await soak(SHORT, tmp_path, schemathesis_examples=5, raw_examples=60)
    with capsys.disabled():
        print("\n" + report.table())
    assert [f.what.split()[0] for f in report.load.faults] == ["kill", "PostgreSQL", "SIGSTOP", "ZooKeeper"]
    accepted = [c for c in report.load.history.calls if c.method == "PUT" and c.status in (200, 201)]
    assert accepted, "the load made no progress"
    assert report.verdict.lost == 0
    assert report.verdict.violations == []
    assert report.load.audit.ok, report.load.audit.violations
    assert report.bad.tried["schemathesis"] > 0
    assert report.bad.tried["raw fuzzer"] == 60
    assert report.bad.server_errors == []
    assert report.bad.changed == []
