"""Tokens from the future (422) and a token source that went back (503 token_source_regressed).

The guard is pure decision logic over the `TokenSource` Protocol, so a small
in-memory source stands in for the real ones here; the last test runs the guard
on etcd over mutual TLS, as `serve --tokens` opens it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from fencegate.lab.cluster import LocalCluster
from gateway.fencing import FutureGuard
from gateway.metrics import Metrics
from lockclient import open_token_source
from lockclient.errors import TokenSourceError
from storage.fenced import stale_token
from tests.gateway.conftest import MakeClient
from tests.waiting import eventually


class CountingSource:
    """A `TokenSource` whose upper bound the test sets; counts how often it is asked."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.asked = 0
        self.closed = False
        self.down = False

    async def next_token(self, resource: str) -> int:
        self.bound += 1
        return self.bound

    async def upper_bound(self, resource: str) -> int:
        self.asked += 1
        if self.down:
            raise TokenSourceError("source down", source="test")
        return self.bound

    async def aclose(self) -> None:
        self.closed = True


async def test_422_token_above_the_source_bound_changes_nothing(make_client: MakeClient) -> None:
    source = CountingSource(100)
    client = await make_client(tokens=source)
    resp = await client.put("/v1/objects/k", data=b"x", headers={"Fencing-Token": str(2**62)})
    body = await resp.json()
    assert resp.status == 422
    assert {k: body[k] for k in ("error", "resource", "token", "bound")} == {
        "error": "token_from_the_future",
        "resource": "k",
        "token": 2**62,
        "bound": 100,
    }
    assert (await (await client.get("/v1/fences/k")).json())["highest"] == 0
    ok = await client.put("/v1/objects/k", data=b"x", headers={"Fencing-Token": "100"})
    assert ok.status == 201


async def test_the_bound_is_cached_and_asked_again_only_above_it(make_client: MakeClient) -> None:
    source = CountingSource(50)
    client = await make_client(tokens=source)
    source.asked = 0  # the start-up readiness read
    for token in (10, 20, 50, 50):
        assert (
            await client.put("/v1/objects/c", data=b"x", headers={"Fencing-Token": str(token)})
        ).status < 300
    assert source.asked == 1
    source.bound = 80  # the source issued more tokens since
    assert (await client.put("/v1/objects/c", data=b"x", headers={"Fencing-Token": "70"})).status == 200
    assert source.asked == 2
    assert (await client.put("/v1/objects/c", data=b"x", headers={"Fencing-Token": "75"})).status == 200
    assert source.asked == 2


async def test_fenced_reads_are_guarded_too(make_client: MakeClient) -> None:
    client = await make_client(tokens=CountingSource(5))
    resp = await client.get("/v1/objects/r", headers={"Fencing-Token": "6"})
    assert (resp.status, (await resp.json())["error"]) == (422, "token_from_the_future")


async def test_503_token_source_regressed_is_counted_not_409(make_client: MakeClient) -> None:
    source = CountingSource(1000)
    client = await make_client(tokens=source)
    assert (await client.put("/v1/objects/g", data=b"x", headers={"Fencing-Token": "900"})).status == 201
    source.bound = 10  # restored from an old backup: it now hands out 11, 12, ...
    resp = await client.put("/v1/objects/g", data=b"honest", headers={"Fencing-Token": "11"})
    body = await resp.json()
    assert resp.status == 503
    assert {k: body[k] for k in ("error", "resource", "highest", "bound")} == {
        "error": "token_source_regressed",
        "resource": "g",
        "highest": 900,
        "bound": 10,
    }
    assert await (await client.get("/v1/objects/g")).read() == b"x"
    metrics = await (await client.get("/metrics")).text()
    assert "fencegate_token_source_regressed_total 1.0" in metrics


async def test_a_plain_stale_token_stays_409_when_the_source_is_healthy(make_client: MakeClient) -> None:
    source = CountingSource(1000)
    client = await make_client(tokens=source)
    await client.put("/v1/objects/h", data=b"x", headers={"Fencing-Token": "900"})
    resp = await client.put("/v1/objects/h", data=b"x", headers={"Fencing-Token": "899"})
    assert (resp.status, (await resp.json())["error"]) == (409, "stale_token")


async def test_503_when_the_source_cannot_answer(make_client: MakeClient) -> None:
    source = CountingSource(10)
    source.down = True
    client = await make_client(tokens=source)
    resp = await client.put("/v1/objects/d", data=b"x", headers={"Fencing-Token": "5"})
    assert (resp.status, (await resp.json())["error"]) == (503, "token_source_unavailable")
    assert (await (await client.get("/v1/fences/d")).json())["highest"] == 0


async def test_the_app_closes_its_source(make_client: MakeClient) -> None:
    source = CountingSource(10)
    client = await make_client(tokens=source)
    await client.close()
    assert source.closed


async def test_without_a_source_the_start_log_says_the_guard_is_off(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="gateway"):
        client = await make_client()
    assert any("guard is OFF" in r.getMessage() for r in caplog.records)
    resp = await client.put("/v1/objects/f", data=b"x", headers={"Fencing-Token": str(2**62)})
    assert resp.status == 201


async def test_with_a_source_the_start_log_names_it_and_says_the_guard_is_on(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    source = open_token_source(f"sqlite:///{tmp_path / 'tokens.db'}")
    with caplog.at_level("INFO", logger="gateway"):
        await make_client(tokens=source)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "guard is on" in r.getMessage()]
    assert said == [("INFO", f"token source {source!r}: the token-from-the-future guard is on")]


async def test_an_etcd_source_over_mutual_tls_guards_and_its_start_log_shows_no_files(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture, etcd_tls_cluster: LocalCluster, unique: str
) -> None:
    """`serve --tokens etcd://...?use_ssl=true&ca=...&certfile=...&keyfile=...` opens this very source."""
    url = etcd_tls_cluster.etcd
    source = open_token_source(url)
    drawn = await source.next_token(unique)
    with caplog.at_level("INFO", logger="gateway"):
        client = await make_client(tokens=source)
    said = [r.getMessage() for r in caplog.records if "guard is on" in r.getMessage()]
    shown = f"EtcdTokens({urlsplit(url).netloc!r}, use_ssl=True)"  # the hosts alone
    assert said == [f"token source {shown}: the token-from-the-future guard is on"]
    assert not any(str(etcd_tls_cluster.dir) in r.getMessage() for r in caplog.records)  # no file paths
    resp = await client.put(f"/v1/objects/{unique}", data=b"x", headers={"Fencing-Token": str(drawn)})
    assert resp.status == 201
    resp = await client.put(f"/v1/objects/{unique}", data=b"x", headers={"Fencing-Token": str(drawn + 10**6)})
    assert (resp.status, (await resp.json())["error"]) == (422, "token_from_the_future")


class GatedSource(CountingSource):
    """A `CountingSource` whose reads of the bound wait until the test opens the gate."""

    def __init__(self, bound: int) -> None:
        super().__init__(bound)
        self.gate = asyncio.Event()

    async def upper_bound(self, resource: str) -> int:
        bound = await super().upper_bound(resource)
        await self.gate.wait()
        return bound


async def test_refusals_explained_at_once_share_one_read_of_the_source() -> None:
    """A burst of stale writers was a burst of reads of the source, one per refusal."""
    source = GatedSource(10)
    guard = FutureGuard(source, metrics=Metrics())
    refusals = [asyncio.create_task(guard.explain(stale_token("r", 5, 10))) for _ in range(20)]
    other = asyncio.create_task(guard.explain(stale_token("s", 5, 10)))  # another resource: a read of its own
    await eventually(lambda: source.asked >= 2, what="the reads of r and s")
    refusals[0].cancel()  # a caller that gives up leaves the shared read to the others
    source.gate.set()
    await asyncio.gather(*refusals[1:], other)
    assert source.asked == 2
    assert refusals[0].cancelled()


async def test_a_shared_read_that_finds_the_source_went_back_answers_every_refusal_503() -> None:
    source = GatedSource(3)  # the mark 10 is above what the source says it issued
    guard = FutureGuard(source, metrics=Metrics())
    refusals = [asyncio.create_task(guard.explain(stale_token("r", 5, 10))) for _ in range(8)]
    await eventually(lambda: source.asked >= 1, what="the shared read")
    source.gate.set()
    answers = await asyncio.gather(*refusals, return_exceptions=True)
    assert [getattr(answer, "code", None) for answer in answers] == ["token_source_regressed"] * 8
    assert source.asked == 1
    source.bound = 20  # moved past the mark: the next refusal reads again and is a plain stale refusal
    await guard.explain(stale_token("r", 5, 10))
    assert source.asked == 2
