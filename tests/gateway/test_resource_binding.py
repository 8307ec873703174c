"""Invariant 6: an object belongs to one resource, and no request reaches it through another.

Each test plays the stale or hostile client: the same key written under the
lock's resource and then under the key itself or a fresh name, a fenced read
or delete naming another resource, a recreate after delete, two writers
racing for one new key under different names. On every engine and mode: SQLite
with group commit and with one transaction per request, and PostgreSQL (in
process, and as two `fencegate serve` replicas on one database).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import aiohttp
import pytest

from tests.gateway.conftest import AppClient


@pytest.fixture
def client(engine_client: AppClient) -> AppClient:
    """Every test here runs on each engine and mode."""
    return engine_client


@pytest.fixture
def ns() -> str:
    """A namespace of names no other test uses (PostgreSQL's database is shared)."""
    return f"b{uuid.uuid4().hex[:10]}"


def fenced(token: int, resource: str | None = None) -> dict[str, str]:
    headers = {"Fencing-Token": str(token)}
    if resource is not None:
        headers["Fencing-Resource"] = resource
    return headers


async def mark(client: AppClient, resource: str) -> int:
    resp = await client.get(f"/v1/fences/{resource}")
    highest: int = (await resp.json())["highest"]
    return highest


async def assert_mismatch(resp: aiohttp.ClientResponse, *, named: str, belongs_to: str) -> None:
    body = await resp.json()
    assert resp.status == 409, body
    assert body["error"] == "resource_mismatch"
    assert (body["resource"], body["object_resource"]) == (named, belongs_to)
    assert f"Fencing-Resource: {belongs_to}" in body["detail"]  # the fix


async def test_a_stale_writer_cannot_sidestep_the_fence_by_naming_another_resource(
    client: AppClient, ns: str
) -> None:
    key, lock = f"{ns}/mix/42", f"{ns}/mix"
    first = await client.put(f"/v1/objects/{key}", data=b"by 1000", headers=fenced(1000, lock))
    assert first.status == 201
    no_header = await client.put(f"/v1/objects/{key}", data=b"by 999", headers=fenced(999))
    await assert_mismatch(no_header, named=key, belongs_to=lock)
    fresh_name = await client.put(f"/v1/objects/{key}", data=b"by 5", headers=fenced(5, f"{ns}/other"))
    await assert_mismatch(fresh_name, named=f"{ns}/other", belongs_to=lock)

    stored = await client.get(f"/v1/objects/{key}")
    assert await stored.read() == b"by 1000"
    assert (stored.headers["Fencing-Token"], stored.headers["Object-Version"]) == ("1000", "1")
    # Refused before the fence: no mark moved, not even the wrongly named resources'.
    assert [await mark(client, r) for r in (lock, key, f"{ns}/other")] == [1000, 0, 0]


async def test_a_fenced_read_or_delete_naming_another_resource_is_refused_and_changes_nothing(
    client: AppClient, ns: str
) -> None:
    key, lock = f"{ns}/doc", f"{ns}/lock"
    assert (await client.put(f"/v1/objects/{key}", data=b"v", headers=fenced(7, lock))).status == 201
    read = await client.get(f"/v1/objects/{key}", headers=fenced(50, f"{ns}/elsewhere"))
    await assert_mismatch(read, named=f"{ns}/elsewhere", belongs_to=lock)
    gone = await client.delete(f"/v1/objects/{key}", headers=fenced(50))
    await assert_mismatch(gone, named=key, belongs_to=lock)
    assert await (await client.get(f"/v1/objects/{key}")).read() == b"v"
    assert [await mark(client, r) for r in (lock, key, f"{ns}/elsewhere")] == [7, 0, 0]
    # A plain read names no resource and moves no mark: it is not refused.
    assert (await client.get(f"/v1/objects/{key}")).status == 200


async def test_a_delete_does_not_free_the_key(client: AppClient, ns: str) -> None:
    key, lock = f"{ns}/doc", f"{ns}/lock"
    assert (await client.put(f"/v1/objects/{key}", data=b"v1", headers=fenced(10, lock))).status == 201
    assert (await client.delete(f"/v1/objects/{key}", headers=fenced(10, lock))).status == 200

    elsewhere = await client.put(f"/v1/objects/{key}", data=b"stale", headers=fenced(1, f"{ns}/other"))
    await assert_mismatch(elsewhere, named=f"{ns}/other", belongs_to=lock)
    as_the_key = await client.put(f"/v1/objects/{key}", data=b"stale", headers=fenced(1))
    await assert_mismatch(as_the_key, named=key, belongs_to=lock)
    below = await client.put(f"/v1/objects/{key}", data=b"stale", headers=fenced(9, lock))
    assert (below.status, (await below.json())["error"]) == (409, "stale_token")
    assert (await client.get(f"/v1/objects/{key}")).status == 404

    again = await client.put(f"/v1/objects/{key}", data=b"v2", headers=fenced(11, lock))
    assert again.status == 201  # the key's own resource, with a token that passes its mark
    assert await (await client.get(f"/v1/objects/{key}")).read() == b"v2"


async def test_concurrent_first_writes_under_different_resources_bind_the_key_once(
    client: AppClient, ns: str
) -> None:
    keys = [f"{ns}/k{i}" for i in range(12)]

    async def put(key: str, resource: str, token: int) -> tuple[str, int, dict[str, Any]]:
        resp = await client.put(f"/v1/objects/{key}", data=resource.encode(), headers=fenced(token, resource))
        return resource, resp.status, await resp.json()

    # Per key, a writer under the lock's name with a low token and one under the key with a high one.
    answers = await asyncio.gather(
        *(put(key, name, token) for key in keys for name, token in ((f"{ns}/lock", 1), (key, 100)))
    )
    for key in keys:
        mine = [(resource, status, body) for resource, status, body in answers if body.get("key") == key]
        won = [resource for resource, status, _ in mine if status in (200, 201)]
        lost = [body for _, status, body in mine if status not in (200, 201)]
        assert (len(won), len(lost)) == (1, 1), mine
        assert (lost[0]["error"], lost[0]["object_resource"]) == ("resource_mismatch", won[0])
        stored = await client.get(f"/v1/objects/{key}")
        assert await stored.read() == won[0].encode()
        assert stored.headers["Fencing-Resource"] == won[0]


async def test_the_content_type_a_writer_sent_comes_back(client: AppClient, ns: str) -> None:
    key = f"{ns}/page"
    headers = {**fenced(1), "Content-Type": "text/plain; charset=utf-8"}
    assert (await client.put(f"/v1/objects/{key}", data="é".encode(), headers=headers)).status == 201
    read = await client.get(f"/v1/objects/{key}")
    assert read.headers["Content-Type"] == "text/plain; charset=utf-8"
    untyped = f"{ns}/blob"
    assert (await client.put(f"/v1/objects/{untyped}", data=b"\0", headers=fenced(1))).status == 201
    assert (await client.get(f"/v1/objects/{untyped}")).headers["Content-Type"] == "application/octet-stream"
    bad = await client.put(f"/v1/objects/{ns}/x", data=b"", headers={**fenced(1), "Content-Type": "x" * 300})
    assert (bad.status, (await bad.json())["error"]) == (400, "bad_request")


async def test_the_three_requests_a_delete_and_a_recreate_across_two_replicas(
    replicas: list[str], ns: str
) -> None:
    """A write, a delete and a recreate, each sent to the other replica than the one before."""
    key, lock, other = f"{ns}/mix/42", f"{ns}/mix", f"{ns}/other"
    async with aiohttp.ClientSession() as session:

        async def send(i: int, method: str, headers: dict[str, str], data: bytes = b"") -> tuple[int, Any]:
            url = f"{replicas[i % 2]}/v1/objects/{key}"
            async with session.request(method, url, data=data, headers=headers) as r:
                body = await r.read()
                return r.status, json.loads(body) if r.content_type == "application/json" else body

        async def marks() -> list[int]:
            found = []
            for i, resource in enumerate((lock, key, other)):
                async with session.get(f"{replicas[i % 2]}/v1/fences/{resource}") as r:
                    found.append((await r.json())["highest"])
            return found

        assert (await send(0, "PUT", fenced(1000, lock), b"by 1000"))[0] == 201
        for i, (headers, named) in enumerate(((fenced(999), key), (fenced(5, other), other)), start=1):
            status, body = await send(i, "PUT", headers, b"stale")
            assert (status, body["error"], body["resource"], body["object_resource"]) == (
                409, "resource_mismatch", named, lock)  # fmt: skip
        assert await send(1, "GET", {}) == (200, b"by 1000")
        assert await marks() == [1000, 0, 0]

        assert (await send(0, "DELETE", fenced(1000, lock)))[0] == 200
        for i, (method, headers) in enumerate(
            (
                ("PUT", fenced(5, other)),
                ("PUT", fenced(999)),
                ("GET", fenced(5, other)),
                ("DELETE", fenced(5)),
            )
        ):
            status, body = await send(i, method, headers, b"stale" if method == "PUT" else b"")
            assert (status, body["error"], body["object_resource"]) == (409, "resource_mismatch", lock), (
                method
            )
        below = await send(1, "PUT", fenced(999, lock), b"stale")
        assert (below[0], below[1]["error"]) == (409, "stale_token")
        assert (await send(0, "GET", {}))[0] == 404
        assert await marks() == [1000, 0, 0]


async def test_two_replicas_never_both_pass_one_new_key_under_different_resources(
    replicas: list[str], ns: str
) -> None:
    """A write under `a` races a write, fenced read or delete under `b` of the same new key: exactly one
    passes its fence (2xx, or 404 for a read or delete that came first), and that one owns the key."""
    async with aiohttp.ClientSession() as session:

        async def send(url: str, method: str, key: str, resource: str, token: int) -> tuple[str, int, Any]:
            data = resource.encode() if method == "PUT" else b""
            headers = fenced(token, resource)
            async with session.request(method, f"{url}/v1/objects/{key}", data=data, headers=headers) as r:
                return (
                    resource,
                    r.status,
                    json.loads(await r.read()) if method != "GET" or r.status != 200 else {},
                )

        for i in range(30):
            key, method = f"{ns}/race{i}", ("PUT", "DELETE", "GET")[i % 3]
            one, two = await asyncio.gather(
                send(replicas[i % 2], "PUT", key, f"{ns}/a", 1 + i),
                send(replicas[(i + 1) % 2], method, key, f"{ns}/b", 1000 + i),
            )
            passed = [answer for answer in (one, two) if answer[1] in (200, 201, 404)]
            refused = [answer for answer in (one, two) if answer[1] == 409]
            assert (len(passed), len(refused)) == (1, 1), (one, two)
            owner = passed[0][0]
            assert (refused[0][2]["error"], refused[0][2]["object_resource"]) == ("resource_mismatch", owner)
            async with session.get(f"{replicas[i % 2]}/v1/objects/{key}") as r:
                if owner == f"{ns}/a" or method == "PUT":
                    assert (await r.read(), r.headers["Fencing-Resource"]) == (owner.encode(), owner)
                else:
                    assert r.status == 404  # b's read or delete came first and found nothing; a was refused
