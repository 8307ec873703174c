"""The client's `If-Match` in front of real SeaweedFS: the fenced read-modify-write loses no update.

Two gateways on SQLite files of their own, one of them reaching the store
through the lab's `DelayProxy`: they share nothing but the store, so what
holds here holds by the store's compare-and-swap on the client's tag. Each
test is written as a stale or hostile client would send it, and reads what
the store finally holds.

The late cases hold A's write on its connection past A's `--upstream-timeout`
(504: outcome unknown), then let it through. SeaweedFS may drop a request
whose client closed the connection before it arrived (tests/gateway/test_s3_timeout.py),
so once the store has answered the held connection the test delivers the
write once more as A sent it, precondition and all (unless the store holds
it already): a path that delivers it while the connection still lives.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from fencegate.lab.faults.proxy import DelayProxy
from gateway.transport import REQUEST, VersionChanged
from lockclient import SQLiteTokens
from tests.gateway.conftest import AppClient, MakeClient
from tests.gateway.ifmatch_support import (
    TIMEOUT,
    Late,
    applied,
    increment_afresh,
    increments,
    increments_schedule,
    late_increment,
    overtaken,
    release,
    retried,
    stale_everywhere,
    transport_of,
)
from tests.gateway.s3_support import delayed_path, direct_client, held


@pytest.fixture
async def proxy(s3_store: dict[str, str]) -> AsyncIterator[DelayProxy]:
    async with delayed_path(s3_store) as path:
        yield path


async def _replica(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, data_dir: Path, *,
    endpoint: str | None = None, **settings: object,
) -> AppClient:  # fmt: skip
    return await make_client(
        upstream=f"s3://{s3_store['bucket']}/{s3_prefix}", upstream_endpoint=endpoint or s3_store["endpoint"],
        data_dir=data_dir, **settings,
    )  # fmt: skip


async def _pair(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path, proxy: DelayProxy,
    **settings: object,
) -> tuple[AppClient, AppClient]:  # fmt: skip
    """Replica A reaches the store through `proxy` (with `settings`), replica B straight."""
    a = await _replica(
        make_client, s3_store, s3_prefix, tmp_path / "a", endpoint=f"http://127.0.0.1:{proxy.port}",
        **settings,
    )  # fmt: skip
    return a, await _replica(make_client, s3_store, s3_prefix, tmp_path / "b")


async def _holds(s3_store: dict[str, str], key: str) -> bytes | None:
    async with direct_client(s3_store) as s3:
        found = await held(s3, s3_store["bucket"], key)
    return None if found is None else found.data


async def test_a_write_landing_between_a_newer_read_and_its_if_match_write_is_not_lost(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path, proxy: DelayProxy
) -> None:
    a, b = await _pair(make_client, s3_store, s3_prefix, tmp_path, proxy)
    control = await increments_schedule(a, b, proxy, "plain", if_match=False)
    assert control == (200, 200, b"1")  # the gap: both acknowledged, one increment lost
    fixed = await increments_schedule(a, b, proxy, "counter", if_match=True)
    assert (fixed.a_status, fixed.b_status, fixed.final) == (200, 412, b"1")
    again = await b.get("/v1/objects/counter", headers={"Fencing-Token": "6"})
    retried = await b.put(
        "/v1/objects/counter", data=b"%d" % (int(await again.read()) + 1),
        headers={"Fencing-Token": "6", "If-Match": again.headers["ETag"]},
    )  # fmt: skip
    assert retried.status == 200
    assert await _holds(s3_store, s3_prefix + "counter") == b"2"


async def test_hundreds_of_if_match_increments_over_a_held_path_lose_none(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path, proxy: DelayProxy
) -> None:
    a, b = await _pair(make_client, s3_store, s3_prefix, tmp_path, proxy)
    tally = await increments([a, b], "n", clients=3, each=70, proxy=proxy)
    assert tally.acknowledged == 210
    assert tally.final == tally.acknowledged
    assert await _holds(s3_store, s3_prefix + "n") == b"210"


async def test_a_stale_etag_and_a_tombstone_s_etag_are_412_and_change_nothing(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path
) -> None:
    gateway = await _replica(make_client, s3_store, s3_prefix, tmp_path / "a")
    first = await gateway.put("/v1/objects/k", data=b"one", headers={"Fencing-Token": "5"})
    old = first.headers["ETag"]
    second = await gateway.put("/v1/objects/k", data=b"two", headers={"Fencing-Token": "5", "If-Match": old})
    assert second.status == 200
    read = await gateway.get("/v1/objects/k")
    assert read.headers["ETag"] == second.headers["ETag"] != old  # the store's ETag, as the write answered
    stale = await gateway.put("/v1/objects/k", data=b"three", headers={"Fencing-Token": "6", "If-Match": old})
    assert (stale.status, (await stale.json())["error"]) == (412, "precondition_failed")
    gone = await gateway.delete("/v1/objects/k", headers={"Fencing-Token": "6", "If-Match": old})
    assert gone.status == 412
    assert await _holds(s3_store, s3_prefix + "k") == b"two"
    # a token below what the store holds is 409 first, even with the current ETag
    below = await gateway.put(
        "/v1/objects/k", data=b"x", headers={"Fencing-Token": "4", "If-Match": second.headers["ETag"]}
    )
    assert (below.status, (await below.json())["error"]) == (409, "stale_token")
    assert (
        await gateway.delete("/v1/objects/k", headers={"Fencing-Token": "7", "If-Match": "*"})
    ).status == 200
    async with direct_client(s3_store) as s3:
        stone = await held(s3, s3_store["bucket"], s3_prefix + "k")
    assert stone is not None
    for condition in (stone.etag, "*"):  # a deleted key is no object, whatever its tombstone's tag
        put = await gateway.put(
            "/v1/objects/k", data=b"back", headers={"Fencing-Token": "8", "If-Match": condition}
        )
        assert put.status == 412
        delete = await gateway.delete("/v1/objects/k", headers={"Fencing-Token": "8", "If-Match": condition})
        assert delete.status == 412
    created = await gateway.put(
        "/v1/objects/k", data=b"new", headers={"Fencing-Token": "8", "If-None-Match": "*"}
    )
    assert created.status == 201
    again = await gateway.put(
        "/v1/objects/k", data=b"dup", headers={"Fencing-Token": "8", "If-None-Match": "*"}
    )
    assert again.status == 412
    assert await _holds(s3_store, s3_prefix + "k") == b"new"


async def test_malformed_preconditions_are_400_and_a_future_token_422_before_any_precondition(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path
) -> None:
    tokens = SQLiteTokens(tmp_path / "tokens.db")
    issued = await tokens.next_token("k")
    gateway = await _replica(make_client, s3_store, s3_prefix, tmp_path / "a", tokens=tokens)
    put = await gateway.put("/v1/objects/k", data=b"v", headers={"Fencing-Token": str(issued)})
    etag = put.headers["ETag"]
    for bad in (
        [("If-Match", etag), ("If-Match", etag)],
        [("If-Match", "W/" + etag)],
        [("If-Match", f"{etag}, {etag}")],
        [("If-Match", "no-quotes")],
        [("If-Match", etag), ("If-None-Match", "*")],
        [("If-None-Match", etag)],
    ):
        headers = [("Fencing-Token", str(issued)), *bad]
        for method in ("PUT", "DELETE"):
            refused = await gateway.request(method, "/v1/objects/k", data=b"bad", headers=headers)
            assert (refused.status, (await refused.json())["error"]) == (400, "bad_request"), (method, bad)
    future = await gateway.put(
        "/v1/objects/k", data=b"future", headers={"Fencing-Token": str(2**62), "If-Match": etag}
    )
    assert (future.status, (await future.json())["error"]) == (422, "token_from_the_future")
    assert await _holds(s3_store, s3_prefix + "k") == b"v"
    assert (await (await gateway.get("/v1/fences/k")).json())["highest"] == issued


async def test_an_if_match_write_with_an_idempotency_key_is_replayed_as_first_answered(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path
) -> None:
    gateway = await _replica(make_client, s3_store, s3_prefix, tmp_path / "a")
    put = await gateway.put("/v1/objects/k", data=b"one", headers={"Fencing-Token": "5"})
    headers = {"Fencing-Token": "5", "If-Match": put.headers["ETag"], "Idempotency-Key": "rmw-1"}
    first = await gateway.put("/v1/objects/k", data=b"two", headers=headers)
    assert first.status == 200
    other = await gateway.put("/v1/objects/k", data=b"three", headers={"Fencing-Token": "5"})
    assert other.status == 200
    replay = await gateway.put("/v1/objects/k", data=b"two", headers=headers)
    assert (replay.status, await replay.json()) == (200, await first.json())  # not 412: the first outcome
    assert await _holds(s3_store, s3_prefix + "k") == b"three"  # applied once
    failed = {**headers, "Idempotency-Key": "rmw-2"}  # the same stale tag: 412, then 412 again
    for _ in range(2):
        refused = await gateway.put("/v1/objects/k", data=b"two", headers=failed)
        assert refused.status == 412
    assert await _holds(s3_store, s3_prefix + "k") == b"three"


async def _again(a: AppClient, late: Late) -> None:
    """The held write delivered once more as A sent it (module docstring); VersionChanged if the
    store refuses it."""
    await transport_of(a).put_if(late.key, late.data, **late.options)


def _answered(proxy: DelayProxy) -> Callable[[], int]:
    """What grows once the store answered the held connection: the bytes the proxy sent down."""
    return lambda: proxy.forwarded["down"]


async def test_a_stale_if_match_write_answered_504_and_landing_after_a_newer_one_changes_nothing(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path, proxy: DelayProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Token 5 read the key and wrote on its ETag through A: 504, held. Token 6 read the same version
    through B and wrote on the same ETag: 200. Token 5's write then reaches the store: refused, the
    store keeps token 6's bytes; its retry, on either replica, is 409 (a higher token is stored)."""
    a, b = await _pair(make_client, s3_store, s3_prefix, tmp_path, proxy, upstream_timeout=TIMEOUT)
    late, stale = await overtaken(a, b, proxy, monkeypatch, "/v1/objects/x")
    await release(proxy, late, _answered(proxy), "the store answering the held write")
    with pytest.raises(VersionChanged):
        await _again(a, late)
    assert await _holds(s3_store, s3_prefix + "x") == b"v6"
    await stale_everywhere((a, b), "/v1/objects/x", late, stale)  # A's mark never saw 6: the store's token
    async with direct_client(s3_store) as s3:
        found = await held(s3, s3_store["bucket"], s3_prefix + "x")
    assert found is not None
    assert (found.data, found.token) == (b"v6", 6)


@pytest.mark.parametrize("keyed", [False, True], ids=["without-idempotency-key", "with-idempotency-key"])
async def test_the_retries_of_an_if_match_increment_answered_504_that_landed_apply_it_once(
    keyed: bool, make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path,
    proxy: DelayProxy, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """An increment of 0 on its ETag answered 504 lands late, nothing written in between. Its retries
    (the same PUT, the same If-Match) send nothing: without a key they are 412 (the tag moved: the
    increment is there, read it); with its Idempotency-Key they are its one success. The next
    increment, read afresh, makes 2: none lost, none applied twice."""
    a, b = await _pair(make_client, s3_store, s3_prefix, tmp_path, proxy, upstream_timeout=TIMEOUT)
    extra = {"Idempotency-Key": uuid.uuid4().hex} if keyed else {}
    late, headers = await late_increment(a, proxy, monkeypatch, "/v1/objects/n", extra)
    await release(proxy, late, _answered(proxy), "the store answering the held write")
    if await _holds(s3_store, s3_prefix + "n") != late.data:  # the store dropped it: deliver it again
        await _again(a, late)
    async with direct_client(s3_store) as s3:
        landed = await held(s3, s3_store["bucket"], s3_prefix + "n")
    assert landed is not None
    assert (landed.data, landed.token, REQUEST in landed.metadata) == (b"1", 5, keyed)
    before = await applied(a)
    assert before >= 1  # the count sees writes: the first one went through A
    answers = await retried(a, "/v1/objects/n", late, headers)
    if keyed:  # the first attempt's success, the same answer each time
        assert {status for status, _ in answers} == {200}, answers
        assert len(set(answers)) == 1, answers
    else:
        refusals = {(status, json.loads(body).get("error")) for status, body in answers}
        assert refusals == {(412, "precondition_failed")}, answers
    assert await applied(a) == before  # no retry was applied at the store
    assert await _holds(s3_store, s3_prefix + "n") == b"1"
    assert await increment_afresh(b, "/v1/objects/n", token=6) == 1  # the 504's increment is there, once
    assert await _holds(s3_store, s3_prefix + "n") == b"2"
