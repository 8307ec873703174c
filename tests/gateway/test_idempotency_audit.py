"""Idempotency-Key over HTTP (a lost answer, then a retry); the audit trail and `fencegate audit verify`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from fencegate.cli import main
from storage import migrate, open_engine
from storage.models import AuditEntry
from tests.gateway.conftest import AppClient, MakeClient
from tests.waiting import eventually

AUDIT_DEADLINE = 10.0


async def write_and_drop_the_answer(client: AppClient, key: str, body: bytes, **headers: str) -> None:
    """Send a PUT and hang up without reading the answer: the client never learns the outcome."""
    assert client.server.port is not None
    _, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    lines = [f"PUT /v1/objects/{key} HTTP/1.1", "Host: t", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def test_retry_after_a_lost_answer_returns_the_first_outcome_and_applies_once(
    client: AppClient,
) -> None:
    headers = {"Fencing-Token": "4", "Idempotency-Key": "3f1c-upload-1"}
    await write_and_drop_the_answer(client, "idem/a", b"payload", **headers)

    async def landed() -> bool:
        return (await client.get("/v1/objects/idem/a")).status != 404

    await eventually(landed, within=AUDIT_DEADLINE, what="the dropped write's commit")
    retry = await client.put("/v1/objects/idem/a", data=b"payload", headers=headers)
    assert retry.status == 201
    assert await retry.json() == {"key": "idem/a", "resource": "idem/a", "token": 4, "version": 1, "size": 7}
    again = await client.put("/v1/objects/idem/a", data=b"payload", headers=headers)
    assert (again.status, (await again.json())["version"]) == (201, 1)
    assert (await client.get("/v1/objects/idem/a")).headers["Object-Version"] == "1"  # applied once
    plain = await client.put("/v1/objects/idem/a", data=b"payload", headers={"Fencing-Token": "4"})
    assert (await plain.json())["version"] == 2  # without the key, a retry applies again


async def test_reusing_an_idempotency_key_for_another_request_is_422_and_changes_nothing(
    client: AppClient,
) -> None:
    headers = {"Fencing-Token": "4", "Idempotency-Key": "k-1"}
    assert (await client.put("/v1/objects/idem/b", data=b"one", headers=headers)).status == 201
    reused = await client.put("/v1/objects/idem/b", data=b"two", headers=headers)
    assert (reused.status, (await reused.json())["error"]) == (422, "idempotency_key_reused")
    assert await (await client.get("/v1/objects/idem/b")).read() == b"one"
    bad = await client.put(
        "/v1/objects/idem/b", data=b"x", headers={"Fencing-Token": "5", "Idempotency-Key": "a b"}
    )
    assert (bad.status, (await bad.json())["error"]) == (400, "bad_request")
    assert await (await client.get("/v1/fences/idem/b")).json() == {"resource": "idem/b", "highest": 4}


async def test_a_retry_with_another_content_type_is_422_and_the_first_type_stays(
    engine_client: AppClient, unique: str
) -> None:
    """A GET answers with the writer's Content-Type, so a retry that names another is another request."""
    key = f"{unique}/typed"
    headers = {"Fencing-Token": "4", "Idempotency-Key": f"{unique}-1"}
    first = await engine_client.put(
        f"/v1/objects/{key}", data=b"{}", headers=headers | {"Content-Type": "application/json"}
    )
    assert first.status == 201
    other = await engine_client.put(
        f"/v1/objects/{key}", data=b"{}", headers=headers | {"Content-Type": "text/plain"}
    )
    assert (other.status, (await other.json())["error"]) == (422, "idempotency_key_reused")
    same = await engine_client.put(
        f"/v1/objects/{key}", data=b"{}", headers=headers | {"Content-Type": "application/json"}
    )
    assert (same.status, await same.json()) == (201, await first.json())  # the same request replays
    found = await engine_client.get(f"/v1/objects/{key}")
    assert (found.headers["Content-Type"], found.headers["Object-Version"]) == ("application/json", "1")


async def test_every_accepted_and_refused_request_is_audited_and_verify_prints_it(
    make_client: MakeClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = await make_client()
    sent = [
        ("PUT", "aud/x", {"Fencing-Token": "9"}, 201),
        ("PUT", "aud/x", {"Fencing-Token": "8"}, 409),
        ("PUT", "aud/x", {}, 428),
        ("PUT", "aud/x", {"Fencing-Token": "-1"}, 400),
        ("GET", "aud/x", {"Fencing-Token": "10"}, 200),
        ("DELETE", "aud/missing", {"Fencing-Token": "1"}, 404),
    ]
    for method, key, headers, status in sent:
        resp = await client.request(method, f"/v1/objects/{key}", data=b"v", headers=headers)
        assert resp.status == status, await resp.text()
    url = f"sqlite:///{(tmp_path / 'fencegate.db').resolve()}"
    engine = open_engine(url)
    rows: list[tuple[object, ...]] = []

    async def all_audited() -> bool:  # refusals are written in the background, a moment later
        async with engine.connect() as conn:
            stmt = select(AuditEntry.method, AuditEntry.token, AuditEntry.status, AuditEntry.outcome)
            rows[:] = sorted((tuple(r) for r in (await conn.execute(stmt)).all()), key=repr)
        return len(rows) >= len(sent)

    try:
        await eventually(all_audited, within=AUDIT_DEADLINE, what=f"{len(sent)} audit entries")
    finally:
        await engine.dispose()
    assert rows == sorted(
        [
            ("PUT", 9, 201, "accepted"),
            ("PUT", 8, 409, "stale_token"),
            ("PUT", None, 428, "token_required"),
            ("PUT", None, 400, "bad_request"),
            ("GET", 10, 200, "accepted"),
            ("DELETE", 1, 404, "not_found"),
        ],
        key=repr,
    )
    assert await asyncio.to_thread(main, ["audit", "verify", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "read 6 audit entries" in out
    assert "stale_token: 1" in out
    assert "ok: the chain holds, accepted tokens never went back" in out


async def test_audit_verify_finds_a_token_that_went_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'forged.db'}"
    engine = open_engine(url)
    try:
        await migrate(engine)
        async with engine.begin() as conn:
            for token in (5, 7, 6):
                await conn.execute(
                    insert(AuditEntry).values(
                        at=datetime.now(UTC),
                        client="forger",
                        method="PUT",
                        key="r",
                        resource="r",
                        token=token,
                        mark=token,
                        status=200,
                        outcome="accepted",
                    )
                )
    finally:
        await engine.dispose()
    assert await asyncio.to_thread(main, ["audit", "verify", "--storage", url]) == 1
    out = capsys.readouterr().out
    assert "accepted token 6 after token 7" in out
    assert "the mark is None but the trail accepted token 7" in out
