"""Bad s3:// settings are one line and exit 2 before the gateway listens; a store answering garbage is 502.

No message names a secret: the wrong secret given is checked against every
line the gateway printed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.servers import free_port
from gateway import Settings
from gateway.errors import BadSetting
from gateway.middlewares import SERVER_ERROR_DETAILS
from storage import open_engine, verify_audit
from tests.gateway.careless_s3 import CarelessS3
from tests.gateway.conftest import MakeClient
from tests.gateway.s3_support import aws_environment

SECRET = "not-the-store-secret-5e1f"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("s3://", "is not a bucket name"),
        ("s3://ab", "is not a bucket name"),
        ("s3://Upper/x", "is not a bucket name"),
        ("s3://a..b", "is not a bucket name"),
        ("s3://key:secret@bucket/x", "may not carry a login or a port"),
        ("s3://bucket:9000/x", "may not carry a login or a port"),
        ("s3://bucket//x", "empty path segment"),
        ("s3://bucket/x?versionId=1", "no query or fragment"),
        ("s3://bucket/caf\u00e9", "printable ASCII"),
    ],
)
def test_a_malformed_s3_url_is_refused_with_the_fault_named(url: str, said: str, tmp_path: Path) -> None:
    with pytest.raises(BadSetting, match=said) as refused:
        Settings(data_dir=tmp_path, upstream=url)
    assert "secret" not in str(refused.value)


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"upstream_endpoint": "http://127.0.0.1:8333"}, "give --upstream s3://BUCKET too"),
        ({"upstream": "http://10.0.0.5/store", "upstream_endpoint": "http://x:1"}, "s3://BUCKET too"),
        ({"upstream": "s3://bucket", "upstream_endpoint": "ftp://127.0.0.1"}, "is not an http"),
        ({"upstream": "s3://bucket", "upstream_endpoint": "http://u:pw@h:0"}, "is not an http"),
    ],
)
def test_an_endpoint_without_an_s3_upstream_or_not_http_is_refused(
    settings: dict[str, str], said: str, tmp_path: Path
) -> None:
    with pytest.raises(BadSetting, match=said) as refused:
        Settings(data_dir=tmp_path, **settings)  # type: ignore[arg-type]
    assert "pw" not in str(refused.value)


async def _serve(*args: str, env: dict[str, str], home: Path) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    base = {"AWS_CONFIG_FILE": str(home / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(home / "none")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fencegate.cli", "serve", "--port", "0", "--data-dir", str(home / "data"),
        *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**clean, **base, **env},
    )  # fmt: skip
    async with asyncio.timeout(60):
        _, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_missing_credentials_a_wrong_secret_or_an_unreachable_store_is_one_line_and_exit_2(
    s3_cluster: LocalCluster, tmp_path: Path
) -> None:
    store = s3_cluster.s3
    upstream = ["--upstream", f"s3://{store['bucket']}/bad-input/"]
    cases = [
        ({}, store["endpoint"], "no AWS credentials found"),
        ({**aws_environment(store, tmp_path), "AWS_SECRET_ACCESS_KEY": SECRET}, store["endpoint"],
         "refused the gateway's credentials (403)"),
        (aws_environment(store, tmp_path), f"http://127.0.0.1:{free_port()}", "the store is unreachable"),
    ]  # fmt: skip
    for env, endpoint, said in cases:
        code, err = await _serve(*upstream, "--upstream-endpoint", endpoint, env=env, home=tmp_path)
        last = err.strip().splitlines()[-1]
        assert code == 2, err
        assert last.startswith("fencegate serve: upstream s3://"), last
        assert said in last
        assert "Traceback" not in err
        assert "listening" not in err
        assert SECRET not in err
        assert store["secret_key"] not in err


async def test_a_store_answering_garbage_is_502_with_the_fixed_message_and_nothing_acknowledged(
    make_client: MakeClient, aiohttp_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    careless = CarelessS3("none")  # it passes the probe
    server = await aiohttp_server(careless.app)
    for name, value in {"AWS_ACCESS_KEY_ID": "AKGARBAGE", "AWS_SECRET_ACCESS_KEY": SECRET}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    gateway = await make_client(
        upstream="s3://garbage-store/p", upstream_endpoint=str(server.make_url("")).rstrip("/"),
        upstream_timeout=5.0,
    )  # fmt: skip
    assert (await gateway.put("/v1/objects/k", data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    careless.garbage = True
    for method, headers in (("PUT", {"Fencing-Token": "2"}), ("GET", {}), ("DELETE", {"Fencing-Token": "3"})):
        answer = await gateway.request(method, "/v1/objects/k", data=b"v2", headers=headers)
        assert answer.status == 502, (method, await answer.text())
        body = await answer.json()
        assert body["error"] == "upstream_failed"
        assert body["detail"] == SERVER_ERROR_DETAILS["upstream_failed"]
        text = await answer.text()
        assert SECRET not in text
        assert "twelve" not in text
        assert "html" not in text
    careless.garbage = False
    _, data, meta = careless.objects["p/k"]
    assert (data, meta["x-amz-meta-fencing-token"]) == (b"v1", "1")
    engine = open_engine(f"sqlite:///{tmp_path / 'fencegate.db'}")
    try:
        report = await verify_audit(engine)
    finally:
        await engine.dispose()
    assert report.ok, report.violations


async def test_readyz_fails_while_the_store_is_unreachable_and_passes_again_once_it_answers(
    make_client: MakeClient, aiohttp_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    careless = CarelessS3("none")
    server = await aiohttp_server(careless.app)
    port = server.port
    for name, value in {"AWS_ACCESS_KEY_ID": "AKREADY", "AWS_SECRET_ACCESS_KEY": SECRET}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    gateway = await make_client(
        upstream="s3://ready-store", upstream_endpoint=f"http://127.0.0.1:{port}", upstream_timeout=2.0
    )
    assert (await gateway.get("/readyz")).status == 200
    await server.close()
    down = await gateway.get("/readyz")
    assert down.status == 503
    assert (await down.json())["error"] == "upstream_unavailable"
    again = await aiohttp_server(careless.app, port=port)
    assert again.port == port
    assert (await gateway.get("/readyz")).status == 200
