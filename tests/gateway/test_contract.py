"""The served OpenAPI document is the contract: `schemathesis run --checks all` finds nothing.

schemathesis generates requests from `/v1/openapi.json` of a real
`fencegate serve` (SQLite, and PostgreSQL on a database of its own): valid
ones must not be refused as malformed, invalid ones must be refused, every
answer must be documented (status, content type, headers, body schema), a
method a path does not take must be 405 with `Allow`, a deleted object must
be gone, and nothing may be 5xx. `schemathesis.toml` beside this file adds
428 (DESIGN.md's answer to a write without a token) to the statuses expected
for a missing header and takes stateful links from the document only (see
its comments); `schemathesis_hooks.py` gives each request an Idempotency-Key
of its own. Nothing else is relaxed. The gateway's log must hold no 5xx
either.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.gateway import GatewayProcess
from tests.gateway.conftest import create_database

CONFIG = Path(__file__).with_name("schemathesis.toml")
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
# A time budget, not a number of cases: schemathesis repeats fuzzing and stateful runs until it is
# spent (some 1,500 requests per 30 s on a quiet machine), so a busy machine tests less, never longer.
BUDGET = 40
RUN_DEADLINE = BUDGET + 120.0  # seconds for start-up and the last requests on top of the budget


def schemathesis(url: str, scratch: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(SCHEMATHESIS),
            "--config-file",
            str(CONFIG),
            "--no-color",
            "run",
            f"{url}/v1/openapi.json",
            "--checks",
            "all",
            "--max-time",
            str(BUDGET),
            "--generation-database",
            "none",
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=scratch,  # its cache and reports land here, not in the checkout
        env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)},
        timeout=RUN_DEADLINE,
        check=False,
    )


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_schemathesis_checks_all_find_no_failure(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    storage: list[str] = []
    if engine == "postgresql":
        cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
        storage = ["--storage", await create_database(cluster.postgres_dsn)]
    gateway = GatewayProcess(tmp_path / "gw.log", "--data-dir", str(tmp_path / "data"), *storage)
    url = await asyncio.to_thread(gateway.start)
    try:
        run = await asyncio.to_thread(schemathesis, url, tmp_path)
    finally:
        await asyncio.to_thread(gateway.stop)
    summary = run.stdout[run.stdout.rfind("SUMMARY") :]
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "No issues found" in summary, summary
    log = gateway.log_path.read_text()
    assert '"status": 5' not in log, [line for line in log.splitlines() if '"status": 5' in line][:5]
