"""`--idempotency-ttl`: a retry within it replays the first outcome; past it the key is forgotten.

On a real SQLite file and the suite's PostgreSQL, through the HTTP API: a
record past a one-second TTL is gone from the table within the sweep's
deadline, and the same key on another request is then a new request (201),
where within the TTL it was refused 422. Bad durations are one line and
exit 2, from the flag and from the environment alike.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from fencegate.cli import main
from fencegate.lab.cluster import LocalCluster
from gateway.durations import Duration, parse_duration
from gateway.retention import SWEEP_EVERY, sweep_pause
from gateway.storage_tls import open_storage
from storage.models import IdempotencyRecord
from tests.gateway.conftest import AppClient, MakeClient
from tests.waiting import eventually


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'expiry.db'}"
    cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
    return cluster.postgres_dsn


async def records(url: str, idem: str) -> int:
    engine = open_storage(url)
    try:
        async with engine.connect() as conn:
            query = select(func.count()).where(IdempotencyRecord.idempotency_key == idem)
            return int((await conn.execute(query)).scalar_one())
    finally:
        await engine.dispose()


async def put(client: AppClient, key: str, body: bytes, idem: str, token: int = 5) -> tuple[int, Any]:
    headers = {"Fencing-Token": str(token), "Idempotency-Key": idem}
    resp = await client.put(f"/v1/objects/{key}", data=body, headers=headers)
    return resp.status, await resp.json()


async def test_a_record_past_its_ttl_is_gone_and_its_key_is_used_afresh(
    make_client: MakeClient, storage: str
) -> None:
    client = await make_client(storage=storage, idempotency_ttl=Duration(1))
    key, idem = f"x{uuid.uuid4().hex[:10]}/doc", uuid.uuid4().hex
    first = await put(client, key, b"first", idem)
    assert first[0] == 201
    assert await put(client, key, b"first", idem) == (201, first[1])  # a retry within the TTL replays
    assert (await put(client, key, b"second", idem))[0] == 422  # the key stands for the first request

    async def forgotten() -> bool:
        return await records(storage, idem) == 0

    await eventually(forgotten, within=20.0, what="the expiry of the record")
    status, body = await put(client, key, b"second", idem)
    assert (status, body["version"]) == (200, 2)  # a new request now: applied, and recorded afresh
    assert await records(storage, idem) == 1
    stored = await client.get(f"/v1/objects/{key}")
    assert await stored.read() == b"second"


def test_the_sweep_runs_often_enough_for_a_minute() -> None:
    assert sweep_pause(86400.0) == SWEEP_EVERY <= 30.0
    assert sweep_pause(2.0) == 2.0


@pytest.mark.parametrize(
    ("text", "seconds", "shown"),
    [("30s", 30, "30s"), ("15m", 900, "15m"), ("24h", 86400, "1d"), ("7d", 604800, "7d"),
     ("1.5h", 5400, "90m")],
)  # fmt: skip
def test_durations_read_and_show_in_their_units(text: str, seconds: float, shown: str) -> None:
    assert (parse_duration(text), str(parse_duration(text))) == (seconds, shown)


@pytest.mark.parametrize("bad", ["0", "0s", "-5m", "nan", "inf", "7x", "24", "", "1e3s", "36501d"])
def test_a_bad_ttl_is_one_line_and_exit_2(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["serve", "--port", "0", "--data-dir", str(tmp_path)]
    assert main([*argv, f"--idempotency-ttl={bad}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fencegate serve: --idempotency-ttl"), err
    assert "\n" not in err
    if bad:  # an empty variable is unset
        monkeypatch.setenv("FENCEGATE_IDEMPOTENCY_TTL", bad)
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("fencegate serve: FENCEGATE_IDEMPOTENCY_TTL"), err
        assert "\n" not in err
    assert not (tmp_path / "fencegate.db").exists()  # nothing was opened
