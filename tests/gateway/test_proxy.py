"""Upstream proxy mode: fence first (committed), then forward, one request per resource at a time.

The upstream is a small aiohttp app that records what reached it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from gateway.config import SQLITE_FILE
from gateway.middlewares import SERVER_ERROR_DETAILS
from storage import open_engine, verify_audit
from tests.gateway.conftest import AppClient, MakeClient

Behaviour = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


class Upstream:
    """An HTTP object store that records each request's token and can misbehave."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.received: list[tuple[str, str, int]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.behaviour: Behaviour | None = None
        self.app = web.Application()
        self.app.router.add_route("*", "/store/{key:.+}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self.received.append((request.method, key, int(request.headers.get("Fencing-Token", "0"))))
            if self.behaviour is not None:
                answer = await self.behaviour(request)
                if answer is not None:
                    return answer
            if request.method == "PUT":
                created = key not in self.objects
                self.objects[key] = await request.read()
                return web.Response(status=201 if created else 200)
            if key not in self.objects:
                return web.Response(status=404)
            if request.method == "DELETE":
                del self.objects[key]
                return web.Response(status=204)
            return web.Response(body=self.objects[key], headers={"Fencing-Token": "1"})
        finally:
            self.in_flight -= 1


@pytest.fixture
async def upstream(aiohttp_server: Any) -> tuple[Upstream, TestServer]:
    up = Upstream()
    server: TestServer = await aiohttp_server(up.app)
    return up, server


@pytest.fixture
async def proxy(make_client: MakeClient, upstream: tuple[Upstream, TestServer]) -> AppClient:
    _, server = upstream
    return await make_client(
        upstream_ordering="trust-path", upstream=str(server.make_url("/store")), upstream_timeout=1.0
    )


async def test_accepted_requests_are_forwarded_and_stale_ones_never(
    proxy: AppClient, upstream: tuple[Upstream, TestServer]
) -> None:
    up, _ = upstream
    put = await proxy.put("/v1/objects/doc/1", data=b"v5", headers={"Fencing-Token": "5"})
    assert (put.status, await put.json()) == (
        201, {"key": "doc/1", "resource": "doc/1", "token": 5, "version": None, "size": 2})  # fmt: skip
    stale = await proxy.put("/v1/objects/doc/1", data=b"v4", headers={"Fencing-Token": "4"})
    assert (stale.status, (await stale.json())["highest"]) == (409, 5)
    assert up.received == [("PUT", "doc/1", 5)]
    assert up.objects == {"doc/1": b"v5"}
    read = await proxy.get("/v1/objects/doc/1")
    assert (read.status, await read.read()) == (200, b"v5")
    gone = await proxy.delete("/v1/objects/doc/1", headers={"Fencing-Token": "6"})
    assert gone.status == 200
    assert (await proxy.get("/v1/objects/doc/1")).status == 404


async def test_the_mark_is_committed_before_forwarding(
    proxy: AppClient, upstream: tuple[Upstream, TestServer]
) -> None:
    up, _ = upstream
    seen_marks: list[int] = []

    async def look_at_the_mark(request: web.Request) -> None:
        async with proxy.session.get(proxy.make_url("/v1/fences/m")) as resp:
            seen_marks.append((await resp.json())["highest"])

    up.behaviour = look_at_the_mark
    for token in (3, 8):
        assert (
            await proxy.put("/v1/objects/m", data=b"x", headers={"Fencing-Token": str(token)})
        ).status < 300
    assert seen_marks == [3, 8]


async def test_requests_for_one_resource_reach_the_upstream_one_at_a_time_in_token_order(
    proxy: AppClient, upstream: tuple[Upstream, TestServer]
) -> None:
    up, _ = upstream

    async def slow(request: web.Request) -> None:
        await asyncio.sleep(0.005)  # widen the window in which a second request could overlap

    up.behaviour = slow
    statuses = await asyncio.gather(
        *(
            proxy.put("/v1/objects/s", data=b"x", headers={"Fencing-Token": str(t)})
            for t in (4, 9, 2, 7, 9, 12, 1)
        )
    )
    forwarded = [token for method, _, token in up.received]
    assert up.max_in_flight == 1
    assert forwarded == sorted(forwarded)
    assert len(forwarded) == sum(1 for r in statuses if r.status < 300)


@pytest.mark.parametrize(
    ("upstream_status", "status", "code"),
    [(500, 502, "upstream_failed"), (400, 502, "upstream_failed"), (503, 503, "upstream_unavailable"),
     (504, 504, "upstream_timeout")],
)  # fmt: skip
async def test_upstream_errors_are_never_success(
    proxy: AppClient, upstream: tuple[Upstream, TestServer], upstream_status: int, status: int, code: str
) -> None:
    up, _ = upstream

    async def fail(request: web.Request) -> web.Response:
        return web.Response(status=upstream_status)

    up.behaviour = fail
    resp = await proxy.put("/v1/objects/e", data=b"x", headers={"Fencing-Token": "1"})
    assert (resp.status, (await resp.json())["error"]) == (status, code)


def written_by(*values: str) -> Behaviour:
    """An upstream that answers each GET with the stored bytes and these `Fencing-Token` headers."""

    async def answer(request: web.Request) -> web.Response | None:
        if request.method != "GET":
            return None
        return web.Response(body=b"v", headers=CIMultiDict(("Fencing-Token", value) for value in values))

    return answer


# What the gateway accepts from a client is what it passes on: a decimal integer in 1..2**63-1, without
# sign, spaces or leading zeros, in one header. A superscript two and a full-width five pass
# str.isdigit(); int() refuses the one and 5000 digits, and would read the other as 5.
@pytest.mark.parametrize(
    "values",
    [("\u00b2",), ("7" * 5000,), (str(2**63),), ("9" * 20,), ("0",), ("-5",), ("\uff15",), ("05",), ("",),
     ("5", "6")],
    ids=lambda values: "+".join(f"{len(v)}-chars" if len(v) > 20 else ascii(v) for v in values),
)  # fmt: skip
async def test_a_malformed_token_from_the_upstream_is_502_and_never_passed_on(
    proxy: AppClient,
    upstream: tuple[Upstream, TestServer],
    caplog: pytest.LogCaptureFixture,
    values: tuple[str, ...],
) -> None:
    up, _ = upstream
    assert (await proxy.put("/v1/objects/w/1", data=b"v", headers={"Fencing-Token": "5"})).status == 201
    up.behaviour = written_by(*values)
    for fencing in ({}, {"Fencing-Token": "6"}):  # a plain read, and a fenced one
        caplog.clear()
        with caplog.at_level("ERROR", logger="gateway.refusals"):
            read = await proxy.get("/v1/objects/w/1", headers=fencing)
            body = await read.json()
        assert (read.status, body["error"]) == (502, "upstream_failed"), body
        assert (
            body["detail"] == SERVER_ERROR_DETAILS["upstream_failed"]
        )  # the fixed text, nothing of the value
        assert "Fencing-Token" not in read.headers
        [logged] = [r.getMessage() for r in caplog.records]
        assert "Fencing-Token" in logged  # the cause, under the id the client was given
        assert body["request_id"] in logged


async def test_a_token_the_upstream_states_in_range_is_passed_on(
    proxy: AppClient, upstream: tuple[Upstream, TestServer]
) -> None:
    up, _ = upstream
    assert (await proxy.put("/v1/objects/w/2", data=b"v", headers={"Fencing-Token": "5"})).status == 201
    for token in ("1", str(2**63 - 1)):
        up.behaviour = written_by(token)
        read = await proxy.get("/v1/objects/w/2")
        assert (read.status, read.headers["Fencing-Token"], await read.read()) == (200, token, b"v")
    up.behaviour = written_by()  # an upstream that keeps no tokens: none is stated
    read = await proxy.get("/v1/objects/w/2")
    assert (read.status, "Fencing-Token" in read.headers) == (200, False)


async def test_an_upstream_that_does_not_answer_is_504(
    proxy: AppClient, upstream: tuple[Upstream, TestServer]
) -> None:
    up, _ = upstream
    never = asyncio.Event()

    async def hang(request: web.Request) -> None:
        await never.wait()

    up.behaviour = hang
    resp = await proxy.put("/v1/objects/h", data=b"x", headers={"Fencing-Token": "1"})
    assert (resp.status, (await resp.json())["error"]) == (504, "upstream_timeout")
    never.set()


async def test_an_unreachable_upstream_is_503(make_client: MakeClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = await make_client(upstream_ordering="trust-path", upstream=f"http://127.0.0.1:{port}/store")
    resp = await client.put("/v1/objects/u", data=b"x", headers={"Fencing-Token": "1"})
    assert (resp.status, (await resp.json())["error"]) == (503, "upstream_unavailable")


async def test_listing_is_not_available_in_proxy_mode(proxy: AppClient) -> None:
    resp = await proxy.get("/v1/objects")
    assert (resp.status, (await resp.json())["error"]) == (501, "not_supported")


async def test_the_start_log_states_what_trust_path_does_not_protect_against(
    make_client: MakeClient, upstream: tuple[Upstream, TestServer], caplog: pytest.LogCaptureFixture
) -> None:
    _, server = upstream
    with caplog.at_level("WARNING", logger="gateway"):
        await make_client(upstream_ordering="trust-path", upstream=str(server.make_url("/store")))
    [line] = [r.getMessage() for r in caplog.records if "upstream proxy mode" in r.getMessage()]
    assert "--upstream-ordering trust-path" in line
    assert "does NOT protect against a request delayed or reordered on the path" in line
    assert "timed out here (504) reaching it late" in line


async def test_readyz_and_a_gauge_state_the_ordering(proxy: AppClient, client: AppClient) -> None:
    ready = await proxy.get("/readyz")
    assert (ready.status, await ready.json()) == (200, {"status": "ready", "upstream_ordering": "trust-path"})
    scraped = await (await proxy.get("/metrics")).text()
    assert 'fencegate_upstream_ordering{mode="trust-path"} 1.0' in scraped.splitlines()
    # the built-in store: no proxy, so neither says a mode
    assert await (await client.get("/readyz")).json() == {"status": "ready"}
    assert "fencegate_upstream_ordering{" not in await (await client.get("/metrics")).text()


async def test_a_key_belongs_to_one_resource_in_proxy_mode_too(
    proxy: AppClient, upstream: tuple[Upstream, TestServer]
) -> None:
    up, _ = upstream
    lease = {"Fencing-Token": "1000", "Fencing-Resource": "mix"}
    assert (await proxy.put("/v1/objects/mix/42", data=b"by 1000", headers=lease)).status == 201
    for stale in ({"Fencing-Token": "999"}, {"Fencing-Token": "5", "Fencing-Resource": "other"}):
        refused = await proxy.put("/v1/objects/mix/42", data=b"stale", headers=stale)
        body = await refused.json()
        assert (refused.status, body["error"], body["object_resource"]) == (409, "resource_mismatch", "mix")
    fenced_read = await proxy.get("/v1/objects/mix/42", headers={"Fencing-Token": "2000"})
    assert (fenced_read.status, (await fenced_read.json())["error"]) == (409, "resource_mismatch")
    assert (await proxy.delete("/v1/objects/mix/42", headers=lease)).status == 200
    recreate = await proxy.put("/v1/objects/mix/42", data=b"x", headers={"Fencing-Token": "3000"})
    assert (recreate.status, (await recreate.json())["error"]) == (409, "resource_mismatch")
    assert up.received == [("PUT", "mix/42", 1000), ("DELETE", "mix/42", 1000)]  # no refusal reached it
    for resource in ("mix/42", "other"):
        assert (await (await proxy.get(f"/v1/fences/{resource}")).json())["highest"] == 0


async def test_a_fenced_read_the_upstream_lacks_is_audited_once(proxy: AppClient, tmp_path: Path) -> None:
    """The fence's committed entry stands for it; a second, refusal-style entry with the older token,
    written after a later write, would make `audit verify` report a token that went back."""
    missing = await proxy.get("/v1/objects/gone/1", headers={"Fencing-Token": "1"})
    assert (missing.status, (await missing.json())["error"]) == (404, "not_found")
    later = await proxy.put("/v1/objects/gone/1", data=b"v", headers={"Fencing-Token": "2"})
    assert later.status == 201
    await proxy.close()  # the gateway shuts down: queued refusals are written
    engine = open_engine(f"sqlite:///{tmp_path / SQLITE_FILE}")
    try:
        report = await verify_audit(engine)
    finally:
        await engine.dispose()
    assert report.ok, report.violations
    assert report.rows == 2
