"""The probe against an http(s) upstream: a correct one passes, a careless one is refused by name.

The upstreams are real processes (`tests.gateway.etag_upstream`) on loopback
ports; `fencegate upstream check URL` and `serve --upstream-ordering
conditional` run the probe on them as a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.probe import CHECKS
from tests.gateway.etag_upstream import Fault, started


def _fencegate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fencegate.cli", *args], capture_output=True, text=True, timeout=120
    )


async def test_a_correct_upstream_passes_every_check_with_json() -> None:
    async with started() as url:
        done = _fencegate("upstream", "check", url, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True
    assert [(c["name"], c["passed"]) for c in report["checks"]] == [(name, True) for name in CHECKS]


@pytest.mark.parametrize(
    ("fault", "check"), [("ignores-if-match", "stale-if-match"), ("weak-etags", "strong-etag")]
)
async def test_a_careless_upstream_fails_the_check_it_breaks(fault: Fault, check: str) -> None:
    async with started(fault) as url:
        done = _fencegate("upstream", "check", url)
    assert done.returncode == 1, done.stderr
    assert f"FAIL  {check}:" in done.stdout
    assert "FAILED" in done.stdout.splitlines()[-1]


async def test_serve_refuses_a_careless_upstream_in_one_line_naming_the_check(tmp_path: Path) -> None:
    async with started("ignores-if-match") as url:
        done = _fencegate(
            "serve", "--port", "0", "--data-dir", str(tmp_path), "--upstream", url,
            "--upstream-ordering", "conditional",
        )  # fmt: skip
    assert done.returncode == 2
    err = done.stderr.strip().splitlines()[-1]
    assert "failed the conditional-write probe: stale-if-match:" in err, done.stderr


def test_a_bad_url_is_one_line_and_exit_2() -> None:
    done = _fencegate("upstream", "check", "ftp://nowhere")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
