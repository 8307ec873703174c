"""The probe passes SeaweedFS and refuses a store that botches conditional writes, at start and on demand."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from fencegate.lab.cluster import LocalCluster
from gateway.probe import CHECKS, probe
from gateway.s3 import open_s3
from gateway.s3url import parse_s3_url
from gateway.transport import SCRATCH_PREFIX
from tests.gateway.careless_s3 import CarelessS3, Fault
from tests.gateway.s3_support import aws_environment, direct_client, fresh_prefix, use_store

FAULTS: dict[Fault, str] = {
    "ignores-if-none-match": "if-none-match",
    "ignores-if-match": "stale-if-match",
    "not-atomic": "concurrent-if-match",
}


async def _fencegate(*args: str, env: dict[str, str], within: float = 60.0) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fencegate.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, **env},
    )  # fmt: skip
    try:
        async with asyncio.timeout(within):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_seaweedfs_passes_every_check_and_the_scratch_key_is_removed(
    s3_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = s3_cluster.s3
    use_store(monkeypatch, store, tmp_path)
    prefix = fresh_prefix()
    location = parse_s3_url(f"s3://{store['bucket']}/{prefix}")
    async with open_s3(location, endpoint=store["endpoint"], call_timeout=10.0) as transport:
        checks = await probe(transport)
    assert [(c.name, c.passed) for c in checks] == [(name, True) for name in CHECKS]
    async with direct_client(store) as s3:
        left = await s3.list_objects_v2(Bucket=store["bucket"], Prefix=prefix + SCRATCH_PREFIX)
    assert left.get("KeyCount", 0) == 0


async def test_upstream_check_prints_every_check_as_json(s3_cluster: LocalCluster, tmp_path: Path) -> None:
    store = s3_cluster.s3
    code, out, err = await _fencegate(
        "upstream", "check", f"s3://{store['bucket']}/{fresh_prefix()}", "--upstream-endpoint",
        store["endpoint"], "--json", env=aws_environment(store, tmp_path),
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    assert report["passed"] is True
    assert [c["name"] for c in report["checks"]] == list(CHECKS)
    assert store["secret_key"] not in out + err


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_store_that_gets_conditional_writes_wrong_is_refused_at_start_naming_the_check(
    fault: Fault, aiohttp_server: Any, tmp_path: Path
) -> None:
    careless = CarelessS3(fault)
    server = await aiohttp_server(careless.app)
    env = {
        "AWS_ACCESS_KEY_ID": "AKCARELESS", "AWS_SECRET_ACCESS_KEY": "careless-secret",
        "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }  # fmt: skip
    endpoint = str(server.make_url("")).rstrip("/")
    code, out, err = await _fencegate(
        "serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--upstream", "s3://careless-store/p",
        "--upstream-endpoint", endpoint, env=env,
    )  # fmt: skip
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        "fencegate serve: upstream s3://careless-store/p/ failed the conditional-write probe: "
    )
    assert f": {FAULTS[fault]}: " in last
    assert "listening" not in err
    assert "careless-secret" not in err
    code, out, _ = await _fencegate(
        "upstream", "check", "s3://careless-store/p", "--upstream-endpoint", endpoint, "--json", env=env
    )
    assert code == 1
    report = json.loads(out)
    assert report["passed"] is False
    assert report["checks"][-1]["name"] == FAULTS[fault]
    assert not report["checks"][-1]["passed"]
