"""Limits on what a client controls: requests in flight, slow headers, slow bodies, header count.

Each violation gets its status and JSON error (parser-level refusals are
aiohttp's plain 400) and changes nothing. Slow clients are driven over raw
sockets so the test controls every byte and its timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from tests.gateway.conftest import AppClient, MakeClient
from tests.waiting import eventually

CLOSE_DEADLINE = 10.0


async def open_raw(client: AppClient) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert client.server.port is not None
    return await asyncio.open_connection("127.0.0.1", client.server.port)


def head(method: str, path: str, **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: test", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, object]]:
    status_line = await reader.readline()
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers["content-length"]))
    return int(status_line.split()[1]), json.loads(body)


async def test_client_over_its_in_flight_cap_gets_429_and_others_and_probes_go_on(
    make_client: MakeClient,
) -> None:
    client = await make_client(max_client_requests=2)
    slow = []
    for i in range(2):  # two PUTs whose bodies are not complete yet: in flight
        reader, writer = await open_raw(client)
        fenced = {"Fencing-Token": "5", "Content-Length": "4"}
        writer.write(head("PUT", f"/v1/objects/cap{i}", **fenced) + b"ab")
        await writer.drain()
        slow.append((reader, writer))
    token = {"Fencing-Token": "5"}
    answers = []

    async def capped() -> bool:  # until the two slow PUTs are in flight, a third still gets in
        answers.append(third := await client.put("/v1/objects/cap9", data=b"x", headers=token))
        if third.status == 429:
            return True
        assert third.status == 201, "the cap did not hold"
        await client.delete("/v1/objects/cap9", headers=token)
        return False

    await eventually(capped, within=CLOSE_DEADLINE, what="a third request answered 429")
    third = answers[-1]
    body = await third.json()
    assert (body["error"], body["limit"], third.headers["Retry-After"]) == ("too_many_requests", 2, "1")
    assert (await client.get("/healthz")).status == 200  # probes are not counted
    for reader, writer in slow:
        writer.write(b"cd")
        await writer.drain()
        assert (await read_answer(reader))[0] == 201
        await close(writer)
    assert (await client.get("/v1/objects/cap9")).status == 404  # the refused write changed nothing
    accepted = await client.put("/v1/objects/cap9", data=b"x", headers={"Fencing-Token": "5"})
    assert accepted.status == 201


async def test_slow_headers_are_cut_off_after_the_idle_timeout(make_client: MakeClient) -> None:
    client = await make_client(idle_timeout=0.5)
    reader, writer = await open_raw(client)
    writer.write(b"PUT /v1/objects/slowloris HTTP/1.1\r\nHost: test\r\n")
    start = time.monotonic()
    closed = False
    while time.monotonic() - start < CLOSE_DEADLINE:
        try:
            writer.write(b"X")  # one byte of a header that never ends
            await writer.drain()
        except ConnectionError:
            closed = True
            break
        try:
            async with asyncio.timeout(0.1):
                if await reader.read(1) == b"":
                    closed = True
                    break
        except TimeoutError:
            continue
    await close(writer)
    assert closed, "a client trickling headers held its connection open"
    assert (await client.get("/v1/fences/slowloris")).status == 200


async def test_slow_body_is_408_and_writes_nothing(make_client: MakeClient) -> None:
    client = await make_client(idle_timeout=0.5)
    reader, writer = await open_raw(client)
    fenced = {"Fencing-Token": "7", "Content-Length": "10"}
    writer.write(head("PUT", "/v1/objects/slowbody", **fenced) + b"abc")
    await writer.drain()
    async with asyncio.timeout(CLOSE_DEADLINE):
        status, body = await read_answer(reader)
    await close(writer)
    assert (status, body["error"]) == (408, "body_timeout")
    assert (await client.get("/v1/objects/slowbody")).status == 404
    assert await (await client.get("/v1/fences/slowbody")).json() == {"resource": "slowbody", "highest": 0}


async def test_too_many_headers_are_refused_by_the_parser_and_change_nothing(client: AppClient) -> None:
    headers = {f"X-Filler-{i}": "y" for i in range(100)}
    resp = await client.put("/v1/objects/hdrs", data=b"x", headers={"Fencing-Token": "3", **headers})
    assert resp.status == 400
    assert await (await client.get("/v1/fences/hdrs")).json() == {"resource": "hdrs", "highest": 0}


async def test_idle_keep_alive_connection_is_closed(make_client: MakeClient) -> None:
    client = await make_client(idle_timeout=0.5)
    reader, writer = await open_raw(client)
    writer.write(head("GET", "/healthz"))
    await writer.drain()
    assert (await read_answer(reader))[0] == 200
    async with asyncio.timeout(CLOSE_DEADLINE):
        assert await reader.read() == b""  # the server closed the idle connection
    await close(writer)
