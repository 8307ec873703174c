"""The client's `If-Match` in front of a conditional http upstream, and on the built-in store (501).

Two gateways (`--upstream-ordering conditional`) on one real PostgreSQL in
front of the real HTTP store (`tests.gateway.etag_upstream`); replica A
reaches it through the lab's `DelayProxy`. What the store holds is read
straight from it. The client is `lockclient.GatewayClient`, as a user runs it.

The late cases are tests/gateway/test_s3_if_match.py's: A's write held past
A's `--upstream-timeout` (504), then let through. The store decides it, but
the gateway closed that connection at its timeout, so the store's answer is
lost with it: the tests read the store's record of what it answered
(`EtagUpstream.writes`). This upstream keeps no metadata, so an
`Idempotency-Key` is 501 and the token of a version whose answer never came
is the highest the gateway's database recorded for the key.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.faults.proxy import DelayProxy
from lockclient import GatewayClient, PreconditionFailed
from lockclient.errors import BadRequest
from tests.gateway import ifmatch_support as support
from tests.gateway.conftest import AppClient, MakeClient, create_database
from tests.gateway.etag_upstream import EtagUpstream
from tests.gateway.ifmatch_support import increments, increments_schedule


@pytest.fixture
def store() -> EtagUpstream:
    return EtagUpstream()


@pytest.fixture
async def upstream(aiohttp_server: Any, store: EtagUpstream) -> str:
    server = await aiohttp_server(store.app)
    return str(server.make_url("")).rstrip("/")


@pytest.fixture
async def proxy(upstream: str) -> AsyncIterator[DelayProxy]:
    where = urlsplit(upstream)
    assert where.hostname is not None
    assert where.port is not None
    async with DelayProxy(where.hostname, where.port) as path:
        yield path


async def _pair(
    make_client: MakeClient, postgres_cluster: LocalCluster, upstream: str, proxy: DelayProxy, wait: float
) -> tuple[AppClient, AppClient]:
    """Replica A reaches the store through `proxy`, replica B straight; both wait `wait` s for it."""
    dsn = await create_database(postgres_cluster.postgres_dsn)
    common = {"storage": dsn, "upstream_ordering": "conditional", "upstream_timeout": wait}
    a = await make_client(upstream=f"http://127.0.0.1:{proxy.port}/o", **common)
    return a, await make_client(upstream=f"{upstream}/o", **common)


@pytest.fixture
async def pair(
    make_client: MakeClient, postgres_cluster: LocalCluster, upstream: str, proxy: DelayProxy
) -> tuple[AppClient, AppClient]:
    return await _pair(make_client, postgres_cluster, upstream, proxy, 5.0)


@pytest.fixture
async def late_pair(
    make_client: MakeClient, postgres_cluster: LocalCluster, upstream: str, proxy: DelayProxy
) -> tuple[AppClient, AppClient]:
    """The pair of the late cases: A answers 504 once its write waited `TIMEOUT` for the store."""
    return await _pair(make_client, postgres_cluster, upstream, proxy, support.TIMEOUT)


def _decided(store: EtagUpstream) -> Callable[[], int]:
    """What grows once the store decided a write: its record of the writes it answered."""
    return lambda: len(store.writes)


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


async def test_a_stale_if_match_write_answered_504_and_landing_after_a_newer_one_changes_nothing(
    late_pair: tuple[AppClient, AppClient], proxy: DelayProxy, store: EtagUpstream, upstream: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Token 5's write on the ETag it read, answered 504 and held, reaches the store after token 6's
    write on the same ETag: the store refuses it 412 and keeps token 6's bytes; its retry, on either
    replica, is 409 (they share one database: its mark saw token 6)."""
    a, b = late_pair
    late, stale = await support.overtaken(a, b, proxy, monkeypatch, "/v1/objects/x")
    await support.release(proxy, late, _decided(store), "the store deciding the held write")
    assert store.writes[-1] == ("PUT", "o/x", 412)
    await support.stale_everywhere((a, b), "/v1/objects/x", late, stale)
    current = await b.get("/v1/objects/x")
    assert (await current.read(), current.headers["Fencing-Token"]) == (b"v6", "6")
    assert await _held(upstream, "x") == b"v6"


async def test_the_retries_of_an_if_match_increment_answered_504_that_landed_apply_it_once(
    late_pair: tuple[AppClient, AppClient], proxy: DelayProxy, store: EtagUpstream, upstream: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """An increment of 0 on its ETag answered 504 lands late, nothing written in between; the
    version it made carries token 5, the bound the 504's row keeps. Its retries (the same PUT, the
    same If-Match) send nothing and are 412 (the tag moved: the increment is there, read it); with
    an Idempotency-Key, which this upstream cannot honour, 501. The next increment, read afresh,
    makes 2: none lost, none applied twice."""
    a, b = late_pair
    late, headers = await support.late_increment(a, proxy, monkeypatch, "/v1/objects/n", {})
    await support.release(proxy, late, _decided(store), "the store deciding the held write")
    assert store.writes[-1] == ("PUT", "o/n", 200)  # applied; its answer was lost with the connection
    assert await _held(upstream, "n") == b"1"
    landed = await b.get("/v1/objects/n")
    assert (await landed.read(), landed.headers["Fencing-Token"]) == (b"1", "5")
    before, writes = await support.applied(a), len(store.writes)
    assert before >= 1  # the count sees writes: the first one went through A
    answers = await support.retried(a, "/v1/objects/n", late, headers)
    refusals = {(status, json.loads(body).get("error")) for status, body in answers}
    assert refusals == {(412, "precondition_failed")}, answers
    keyed = await a.put(
        "/v1/objects/n", data=late.data, headers={**headers, "Idempotency-Key": uuid.uuid4().hex}
    )
    assert (keyed.status, (await keyed.json())["error"]) == (501, "not_supported")
    assert (await support.applied(a), len(store.writes)) == (before, writes)  # no retry reached the store
    assert await _held(upstream, "n") == b"1"
    # the 504's increment is there, once
    assert await support.increment_afresh(b, "/v1/objects/n", token=6) == 1
    assert await _held(upstream, "n") == b"2"
