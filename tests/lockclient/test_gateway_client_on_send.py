"""`GatewayClient(on_send=...)` sees every send as it went on the wire, each retry its own, answered
or not; a hook that raises changes no call's outcome.

Against a served gateway over a private PostgreSQL (stopped, or SIGSTOPped, then back), the
dropping relay of the retry tests, and real Redis masters.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from gateway import Settings, create_app
from lockclient import GatewayClient, GatewayError, GatewayRetry, Redlock, Send, StaleToken
from lockclient import sync as blocking
from tests.gateway.test_storage_down import hung
from tests.lockclient.test_gateway_client_retry import (
    PATIENT,
    PG,
    DroppingRelay,
    OverPostgres,
    locker,
    over_postgres,
)
from tests.waiting import eventually

__all__ = ["locker", "over_postgres"]  # fixtures of the retry tests, used here by name


def _statuses(sends: list[Send]) -> list[int | None]:
    return [send.status for send in sends]


async def test_every_resend_of_a_write_answered_503_is_seen_with_its_key(
    over_postgres: OverPostgres, locker: Redlock[int], resource: str
) -> None:
    storage, url = await over_postgres()
    sends: list[Send] = []
    key = f"{resource}/doc"
    async with (
        GatewayClient(url, retry=PATIENT, on_send=sends.append) as gateway,
        locker.lock(resource, ttl=60.0) as lease,
    ):
        await gateway.put(key, b"before", lease=lease)
        await asyncio.to_thread(storage.stop, PG)
        write = asyncio.create_task(gateway.put(key, b"during", lease=lease))
        await eventually(lambda: 503 in _statuses(sends[1:]), what="a 503 to the write")
        await asyncio.to_thread(storage.restart, PG)
        written = await write

    tried = sends[1:]
    assert len(tried) >= 2
    assert set(_statuses(tried[:-1])) == {503}
    assert tried[-1].status == 200
    assert json.loads(tried[-1].response_body)["version"] == written.version
    assert tried[-1].response_headers["ETag"] == written.etag
    assert all(json.loads(send.response_body)["error"] == "storage_unavailable" for send in tried[:-1])
    assert len({send.headers["Idempotency-Key"] for send in tried}) == 1
    for send in tried:
        assert (send.method, send.path, send.gateway, send.failure) == (
            "PUT",
            f"/v1/objects/{key}",
            url,
            None,
        )
        assert send.headers["Fencing-Token"] == str(lease.token)
        assert send.headers["Fencing-Resource"] == resource
        assert send.started <= send.ended
    assert all(a.ended <= b.started for a, b in itertools.pairwise(tried))  # one after the other


async def test_sends_that_time_out_are_seen_without_a_status(
    over_postgres: OverPostgres, locker: Redlock[int], resource: str
) -> None:
    storage, url = await over_postgres(storage_timeout=5.0, request_timeout=10.0)
    sends: list[Send] = []
    key = f"{resource}/doc"
    async with (
        GatewayClient(url, timeout=0.5, retry=PATIENT, on_send=sends.append) as gateway,
        locker.lock(resource, ttl=120.0, auto_extend=True) as lease,
    ):
        await gateway.put(key, b"v1", lease=lease)
        with hung(storage):
            write = asyncio.create_task(gateway.put(key, b"v2", lease=lease))
            await eventually(lambda: len(sends) >= 3, within=30, what="two sends timed out")
        written = await write
    tried = sends[1:]
    assert [(s.status, s.failure) for s in tried[:2]] == [(None, "timeout"), (None, "timeout")]
    assert (tried[0].response_body, dict(tried[0].response_headers)) == (b"", {})
    assert tried[0].ended - tried[0].started >= 0.4
    assert tried[-1].status == 200
    assert written.version == 2
    assert len({send.headers["Idempotency-Key"] for send in tried}) == 1


async def test_dropped_and_refused_connections_are_seen_with_their_failure(
    aiohttp_client: Any, locker: Redlock[int], resource: str, tmp_path: Path
) -> None:
    served = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw")))
    relay = DroppingRelay(("127.0.0.1", served.server.port), drops=2)
    url = await relay.start()
    sends: list[Send] = []
    try:
        async with (
            GatewayClient(url, retry=GatewayRetry(delay=0.0, jitter=0.0), on_send=sends.append) as gateway,
            locker.lock(resource, ttl=60.0) as lease,
        ):
            await gateway.put(f"{resource}/doc", b"once", lease=lease)
            # aiohttp resends an idempotent request on a fresh connection itself, within one send
            assert 1 <= len(sends) - 1 <= relay.dropped == 2
            assert [(s.status, s.failure) for s in sends[:-1]] == [(None, "disconnected")] * (len(sends) - 1)
            assert sends[-1].status == 201
            await relay.close()
            sends.clear()
            with pytest.raises(GatewayError) as down:  # a fresh client: no kept-alive connection
                async with GatewayClient(
                    url, retry=GatewayRetry(attempts=2, delay=0.0), on_send=sends.append
                ) as gone:
                    await gone.put(f"{resource}/doc", b"never", lease=lease)
            assert down.value.code == "unreachable"
            assert [(s.status, s.failure) for s in sends] == [(None, "unreachable")] * 2  # every send
    finally:
        await relay.close()


async def test_a_stale_write_is_seen_with_its_409_and_a_raising_hook_changes_no_outcome(
    aiohttp_client: Any, locker: Redlock[int], resource: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    served = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw")))
    url = str(served.server.make_url(""))
    sends: list[Send] = []

    def record_then_fail(send: Send) -> None:
        sends.append(send)
        raise RuntimeError("the hook failed")

    key = f"{resource}/doc"
    caplog.set_level(logging.ERROR, logger="lockclient.http")
    async with GatewayClient(url, api_key="not-needed", on_send=record_then_fail) as gateway:
        async with locker.lock(resource, ttl=10.0) as old:
            pass
        async with locker.lock(resource, ttl=10.0) as new:
            written = await gateway.put(key, b"new", lease=new)  # answered as without a hook
        assert (written.version, written.created) == (1, True)
        with pytest.raises(StaleToken) as stale:
            await gateway.put(key, b"old", token=old.token, resource=resource)
        assert stale.value.highest == new.token
        assert (await gateway.get(key)).data == b"new"

    refused = sends[1]
    assert (refused.method, refused.status, refused.failure) == ("PUT", 409, None)
    assert json.loads(refused.response_body)["error"] == "stale_token"
    assert json.loads(refused.response_body)["highest"] == new.token
    assert refused.headers["Fencing-Token"] == str(old.token)
    assert "Authorization" not in refused.headers
    assert _statuses(sends) == [201, 409, 200]  # a 4xx is not resent
    assert sum("on_send hook raised" in r.getMessage() for r in caplog.records) == 3


async def test_the_blocking_client_calls_the_hook_on_its_loop_thread(
    aiohttp_client: Any, tmp_path: Path, resource: str
) -> None:
    served = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw")))
    seen: list[tuple[int, int | None]] = []

    def program() -> int:
        def hook(send: Send) -> None:
            seen.append((threading.get_ident(), send.status))

        with blocking.GatewayClient(str(served.server.make_url("")), on_send=hook) as gateway:
            gateway.put(f"{resource}/doc", b"x", token=3)
            gateway.fence(f"{resource}/doc")
        return threading.get_ident()

    caller = await asyncio.to_thread(program)
    assert [status for _, status in seen] == [201, 200]
    assert {thread for thread, _ in seen} != {caller}
