"""The s3:// proxy on real SeaweedFS: the store's compare-and-swap is the last line of the fence.

Each gateway here is an app on its own SQLite file unless a test shares one:
two apps with two databases share nothing but the store, so what one
refuses because of the other's writes was refused by the store's metadata
and preconditions alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.app_keys import AppKeys
from gateway.transport import TOMBSTONE, VersionChanged
from tests.gateway.conftest import AppClient, MakeClient
from tests.gateway.s3_support import direct_client, held


async def _replica(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, data_dir: Path
) -> AppClient:
    return await make_client(
        upstream=f"s3://{s3_store['bucket']}/{s3_prefix}",
        upstream_endpoint=s3_store["endpoint"],
        data_dir=data_dir,
    )


def _metric(client: AppClient, name: str) -> float:
    registry = client.app[AppKeys.metrics].registry
    return registry.get_sample_value(name) or 0.0


async def test_a_write_lands_with_its_token_and_resource_and_a_stale_one_changes_nothing(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path
) -> None:
    gateway = await _replica(make_client, s3_store, s3_prefix, tmp_path / "a")
    put = await gateway.put("/v1/objects/doc", data=b"v5", headers={"Fencing-Token": "5"})
    assert put.status == 201, await put.text()
    again = await gateway.put("/v1/objects/doc", data=b"v6", headers={"Fencing-Token": "6"})
    assert again.status == 200
    stale = await gateway.put("/v1/objects/doc", data=b"v4", headers={"Fencing-Token": "4"})
    assert stale.status == 409
    async with direct_client(s3_store) as s3:
        found = await held(s3, s3_store["bucket"], s3_prefix + "doc")
    assert found is not None
    assert (found.data, found.token, found.metadata["fencing-resource"]) == (b"v6", 6, "doc")
    got = await gateway.get("/v1/objects/doc")
    assert (await got.read(), got.headers["Fencing-Token"]) == (b"v6", "6")
    fenced = await gateway.get("/v1/objects/doc", headers={"Fencing-Token": "7"})
    assert (await fenced.read(), fenced.headers["Fencing-Token"]) == (b"v6", "6")
    mark = await gateway.get("/v1/fences/doc")
    assert (await mark.json())["highest"] == 7
    # one round trip per write once the version is cached: the first write's HEAD found nothing
    assert _metric(gateway, "fencegate_upstream_round_trips_sum") == 3.0


async def test_the_store_refuses_a_token_below_its_own_even_when_the_gateway_database_never_saw_it(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path
) -> None:
    a = await _replica(make_client, s3_store, s3_prefix, tmp_path / "a")
    b = await _replica(make_client, s3_store, s3_prefix, tmp_path / "b")  # a database of its own: mark 0
    assert (await a.put("/v1/objects/k", data=b"a7", headers={"Fencing-Token": "7"})).status == 201
    refused = await b.put("/v1/objects/k", data=b"b6", headers={"Fencing-Token": "6"})
    assert refused.status == 409
    body = await refused.json()
    assert (body["error"], body["highest"]) == ("stale_token", 7)
    gone = await b.delete("/v1/objects/k", headers={"Fencing-Token": "6"})
    assert gone.status == 409
    async with direct_client(s3_store) as s3:
        found = await held(s3, s3_store["bucket"], s3_prefix + "k")
    assert found is not None
    assert (found.data, found.token) == (b"a7", 7)


async def test_a_stale_cache_costs_one_precondition_failure_and_a_re_read_never_a_wrong_answer(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path
) -> None:
    a = await _replica(make_client, s3_store, s3_prefix, tmp_path / "a")
    b = await _replica(make_client, s3_store, s3_prefix, tmp_path / "b")
    assert (await a.put("/v1/objects/k", data=b"a5", headers={"Fencing-Token": "5"})).status == 201
    assert (await b.put("/v1/objects/k", data=b"b6", headers={"Fencing-Token": "6"})).status == 200
    # a's cache still holds its own version of token 5: the store refuses that ETag, a re-reads and decides
    assert (await a.put("/v1/objects/k", data=b"a7", headers={"Fencing-Token": "7"})).status == 200
    assert _metric(a, "fencegate_upstream_precondition_failures_total") == 1.0
    b_stale = await b.put("/v1/objects/k", data=b"b6-again", headers={"Fencing-Token": "6"})
    assert b_stale.status == 409
    async with direct_client(s3_store) as s3:
        found = await held(s3, s3_store["bucket"], s3_prefix + "k")
    assert found is not None
    assert (found.data, found.token) == (b"a7", 7)


async def test_a_delete_leaves_a_tombstone_that_a_held_older_write_cannot_get_past(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path
) -> None:
    gateway = await _replica(make_client, s3_store, s3_prefix, tmp_path / "a")
    transport = gateway.app[AppKeys.store].transport  # type: ignore[attr-defined]
    assert (await gateway.put("/v1/objects/k", data=b"v5", headers={"Fencing-Token": "5"})).status == 201
    before = await transport.head("k")
    deleted = await gateway.delete("/v1/objects/k", headers={"Fencing-Token": "6"})
    assert deleted.status == 200
    assert (await gateway.get("/v1/objects/k")).status == 404
    assert (await gateway.delete("/v1/objects/k", headers={"Fencing-Token": "6"})).status == 404
    async with direct_client(s3_store) as s3:
        stone = await held(s3, s3_store["bucket"], s3_prefix + "k")
    assert stone is not None
    assert (stone.metadata[TOMBSTONE], stone.token) == ("1", 6)
    # writes sent before the delete and held on the path: a create, and one on the old version
    meta = {"fencing-token": "5", "fencing-resource": "k"}
    with pytest.raises(VersionChanged):
        await transport.put_if("k", b"held", content_type="text/plain", metadata=meta, match=None)
    with pytest.raises(VersionChanged):
        await transport.put_if("k", b"held", content_type="text/plain", metadata=meta, match=before.etag)
    stale = await gateway.put("/v1/objects/k", data=b"v5", headers={"Fencing-Token": "5"})
    assert stale.status == 409
    again = await gateway.put("/v1/objects/k", data=b"v7", headers={"Fencing-Token": "7"})
    assert again.status == 201
    async with direct_client(s3_store) as s3:
        found = await held(s3, s3_store["bucket"], s3_prefix + "k")
    assert found is not None
    assert (found.data, found.token) == (b"v7", 7)


async def test_listing_pages_through_the_store_and_skips_tombstones(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path
) -> None:
    gateway = await _replica(make_client, s3_store, s3_prefix, tmp_path / "a")
    for n, key in enumerate(("k/a", "k/b", "k/c", "k/d", "k/e", "other/x"), start=1):
        put = await gateway.put(f"/v1/objects/{key}", data=key.encode(), headers={"Fencing-Token": str(n)})
        assert put.status == 201
    for key in ("k/b", "k/c", "k/d"):
        deleted = await gateway.delete(f"/v1/objects/{key}", headers={"Fencing-Token": "9"})
        assert deleted.status == 200
    other = await _replica(make_client, s3_store, s3_prefix, tmp_path / "b")  # no cached versions: HEADs
    for client in (gateway, other):
        first = await (await client.get("/v1/objects", params={"prefix": "k/", "limit": "1"})).json()
        assert [o["key"] for o in first["objects"]] == ["k/a"]
        assert (first["objects"][0]["token"], first["objects"][0]["resource"]) == (1, "k/a")
        assert first["next"] == "k/a"
        page = await client.get("/v1/objects", params={"prefix": "k/", "limit": "1", "after": first["next"]})
        second = await page.json()
        assert [o["key"] for o in second["objects"]] == ["k/e"]  # three tombstones between them
        everything = await (await client.get("/v1/objects", params={"prefix": "k/"})).json()
        assert [o["key"] for o in everything["objects"]] == ["k/a", "k/e"]
        assert everything["next"] is None


async def test_a_fenced_request_naming_another_resource_than_the_store_holds_is_refused_and_changes_nothing(
    make_client: MakeClient, s3_store: dict[str, str], s3_prefix: str, tmp_path: Path
) -> None:
    a = await _replica(make_client, s3_store, s3_prefix, tmp_path / "a")
    b = await _replica(make_client, s3_store, s3_prefix, tmp_path / "b")  # its database has no binding for k
    written = await a.put(
        "/v1/objects/k", data=b"a", headers={"Fencing-Token": "3", "Fencing-Resource": "r1"}
    )
    assert written.status == 201
    for method in ("PUT", "GET", "DELETE"):
        headers = {"Fencing-Token": "9", "Fencing-Resource": "r2"}
        refused = await b.request(method, "/v1/objects/k", data=b"b", headers=headers)
        assert refused.status == 409, method
        assert (await refused.json())["error"] == "resource_mismatch"
    async with direct_client(s3_store) as s3:
        found = await held(s3, s3_store["bucket"], s3_prefix + "k")
    assert found is not None
    assert (found.data, found.token, found.metadata["fencing-resource"]) == (b"a", 3, "r1")
