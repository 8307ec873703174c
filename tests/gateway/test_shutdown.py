"""Graceful shutdown of a real `fencegate serve`: SIGTERM stops accepting, finishes what is in flight.

Requests are held in flight deterministically: their headers are sent with
only part of the body, SIGTERM arrives, then the rest of the body. Each must
be answered 2xx and be present after a restart; new connections must be
refused meanwhile; the process must exit 0.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from fencegate.lab.cluster.gateway import GatewayProcess
from gateway.app_keys import AppKeys
from tests.gateway.conftest import AppClient
from tests.waiting import eventually

DEADLINE = 20.0
IN_FLIGHT = 5


async def refuses_connections(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return True
    writer.close()
    await writer.wait_closed()
    return False


@pytest.mark.parametrize("group_commit", ["256", "0"], ids=["group-commit", "one-transaction-per-request"])
async def test_sigterm_finishes_requests_in_flight_and_loses_nothing_acknowledged(
    tmp_path: Path, group_commit: str
) -> None:
    data = str(tmp_path / "data")
    gateway = GatewayProcess(tmp_path / "gw.log", "--data-dir", data, "--group-commit", group_commit)
    url = gateway.start()
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port
    assert host is not None
    assert port is not None
    streams = []
    try:
        for i in range(IN_FLIGHT):
            reader, writer = await asyncio.open_connection(host, port)
            head = f"PUT /v1/objects/sd/{i} HTTP/1.1\r\nHost: t\r\nFencing-Token: {i + 1}\r\n"
            writer.write(head.encode() + b"Content-Length: 8\r\n\r\nhalf")
            await writer.drain()
            streams.append((reader, writer))
        # One round trip on another connection after the partial requests were sent: the server's
        # loop has read them (the kernel had their bytes first), so their handlers are running.
        async with aiohttp.ClientSession() as session, session.get(f"{url}/healthz") as resp:
            assert resp.status == 200
        assert gateway.proc is not None
        gateway.proc.send_signal(signal.SIGTERM)
        await eventually(
            lambda: refuses_connections(host, port),
            within=DEADLINE,
            what="refusing connections",
        )
        answers = []
        for reader, writer in streams:
            writer.write(b"done")
            await writer.drain()
            async with asyncio.timeout(DEADLINE):
                status_line = await reader.readline()
            answers.append(int(status_line.split()[1]))
        assert answers == [201] * IN_FLIGHT
        assert await asyncio.to_thread(gateway.proc.wait, DEADLINE) == 0
        assert f"finishing {IN_FLIGHT} requests in flight" in gateway.log_path.read_text()
    finally:
        for _, writer in streams:
            writer.close()
        if gateway.proc is not None and gateway.proc.poll() is None:
            gateway.proc.kill()
            gateway.proc.wait(timeout=DEADLINE)
    url = gateway.start()
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(IN_FLIGHT):
                async with session.get(f"{url}/v1/objects/sd/{i}") as resp:
                    assert (resp.status, await resp.read()) == (200, b"halfdone")
    finally:
        gateway.stop()


async def test_draining_app_refuses_new_requests_503_and_waits_for_admitted_ones(
    client: AppClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusals are logged at WARNING: a planned shutdown is no error to page anyone over."""
    caplog.set_level("INFO", logger="gateway")
    assert client.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(b"PUT /v1/objects/dr HTTP/1.1\r\nHost: t\r\nFencing-Token: 3\r\nContent-Length: 4\r\n\r\nab")
    await writer.drain()
    drain = client.app[AppKeys.drain]
    # the PUT is admitted and waits for the rest of its body
    await eventually(lambda: drain.in_flight > 0, within=DEADLINE, what="the PUT's admission")
    drained = asyncio.create_task(drain.drain(DEADLINE))
    refused = await client.put("/v1/objects/dr2", data=b"x", headers={"Fencing-Token": "3"})
    assert (refused.status, (await refused.json())["error"]) == (503, "shutting_down")
    assert (await client.get("/readyz")).status == 503
    refusals = [
        (r.levelname, json.loads(r.getMessage().removeprefix("refused "))["path"])
        for r in caplog.records
        if "shutting_down" in r.getMessage()
    ]
    assert refusals == [("WARNING", "/v1/objects/dr2"), ("WARNING", "/readyz")]
    assert not drained.done()
    writer.write(b"cd")
    await writer.drain()
    async with asyncio.timeout(DEADLINE):
        assert (await reader.readline()).split()[1] == b"201"
        assert await drained
    writer.close()
    await writer.wait_closed()
