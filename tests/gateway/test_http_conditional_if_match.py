"""The client's `If-Match` in front of a conditional http upstream, and on the built-in store (501).

Two gateways (`--upstream-ordering conditional`) on one real PostgreSQL in
front of the real HTTP store (`tests.gateway.etag_upstream`); replica A
reaches it through the lab's `DelayProxy`. What the store holds is read
straight from it. The client is `lockclient.GatewayClient`, as a user runs it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.faults.proxy import DelayProxy
from lockclient import GatewayClient, PreconditionFailed
from lockclient.errors import BadRequest
from tests.gateway.conftest import AppClient, MakeClient, create_database
from tests.gateway.etag_upstream import EtagUpstream
from tests.gateway.ifmatch_support import increments, increments_schedule


@pytest.fixture
async def upstream(aiohttp_server: Any) -> str:
    server = await aiohttp_server(EtagUpstream().app)
    return str(server.make_url("")).rstrip("/")


@pytest.fixture
async def proxy(upstream: str) -> AsyncIterator[DelayProxy]:
    where = urlsplit(upstream)
    assert where.hostname is not None
    assert where.port is not None
    async with DelayProxy(where.hostname, where.port) as path:
        yield path


@pytest.fixture
async def pair(
    make_client: MakeClient, postgres_cluster: LocalCluster, upstream: str, proxy: DelayProxy
) -> tuple[AppClient, AppClient]:
    dsn = await create_database(postgres_cluster.postgres_dsn)
    common = {"storage": dsn, "upstream_ordering": "conditional", "upstream_timeout": 5.0}
    a = await make_client(upstream=f"http://127.0.0.1:{proxy.port}/o", **common)
    return a, await make_client(upstream=f"{upstream}/o", **common)


async def _held(upstream: str, key: str) -> bytes | None:
    async with aiohttp.ClientSession() as session, session.get(f"{upstream}/o/{key}") as answer:
        return None if answer.status == 404 else await answer.read()


async def test_a_write_landing_between_a_newer_read_and_its_if_match_write_is_not_lost(
    pair: tuple[AppClient, AppClient], proxy: DelayProxy, upstream: str
) -> None:
    a, b = pair
    control = await increments_schedule(a, b, proxy, "plain", if_match=False)
    assert control == (200, 200, b"1")  # the gap: both acknowledged, one increment lost
    fixed = await increments_schedule(a, b, proxy, "counter", if_match=True)
    assert (fixed.a_status, fixed.b_status, fixed.final) == (200, 412, b"1")
    assert await _held(upstream, "counter") == b"1"


async def test_if_match_increments_over_a_held_path_lose_none(
    pair: tuple[AppClient, AppClient], proxy: DelayProxy, upstream: str
) -> None:
    # fewer than on S3 (tests/gateway/test_s3_if_match.py): each write here is two PostgreSQL commits more
    tally = await increments(list(pair), "n", clients=2, each=15, proxy=proxy)
    assert tally.acknowledged == 30
    assert tally.final == tally.acknowledged
    assert await _held(upstream, "n") == b"30"


async def test_the_client_s_if_match_raises_precondition_failed_on_a_stale_or_deleted_version(
    pair: tuple[AppClient, AppClient], upstream: str
) -> None:
    _, b = pair
    # retry=None: no Idempotency-Key, which this upstream cannot honour (501)
    async with GatewayClient(str(b.make_url("")).rstrip("/"), retry=None) as gateway:
        first = await gateway.put("k", b"one", token=5)
        assert first.etag is not None
        read = await gateway.get("k", token=5)
        assert read.etag == first.etag  # the store's ETag of the version returned
        second = await gateway.put("k", b"two", token=5, if_match=read.etag)
        with pytest.raises(PreconditionFailed) as stale:
            await gateway.put("k", b"three", token=6, if_match=first.etag)
        assert (stale.value.status, stale.value.code) == (412, "precondition_failed")
        with pytest.raises(PreconditionFailed):
            await gateway.delete("k", token=6, if_match=first.etag)
        assert await _held(upstream, "k") == b"two"
        await gateway.delete("k", token=6, if_match=second.etag)
        for condition in (second.etag, "*"):  # a deleted key holds no version to match
            assert condition is not None
            with pytest.raises(PreconditionFailed):
                await gateway.put("k", b"back", token=7, if_match=condition)
    twice = await b.put(
        "/v1/objects/k", data=b"x", headers=[("Fencing-Token", "7"), ("If-Match", "*"), ("If-Match", "*")]
    )
    assert (twice.status, (await twice.json())["error"]) == (400, "bad_request")
    weak = await b.put("/v1/objects/k", data=b"x", headers={"Fencing-Token": "7", "If-Match": 'W/"a"'})
    assert weak.status == 400


async def test_the_built_in_store_answers_if_match_501_and_writes_nothing(client: AppClient) -> None:
    put = await client.put("/v1/objects/k", data=b"one", headers={"Fencing-Token": "5"})
    for headers in ({"If-Match": put.headers["ETag"]}, {"If-None-Match": "*"}):
        refused = await client.put("/v1/objects/k", data=b"two", headers={"Fencing-Token": "6", **headers})
        body = await refused.json()
        assert (refused.status, body["error"]) == (501, "precondition_not_supported")
        assert "SELECT" not in body["detail"]
    gone = await client.delete("/v1/objects/k", headers={"Fencing-Token": "6", "If-Match": "*"})
    assert gone.status == 501
    assert await (await client.get("/v1/objects/k")).read() == b"one"
    assert (await (await client.get("/v1/fences/k")).json())["highest"] == 5  # no mark moved either
    async with GatewayClient(str(client.make_url("")).rstrip("/")) as gateway:
        with pytest.raises(BadRequest):
            await gateway.put("k", b"two", token=6, if_match=put.headers["ETag"])
