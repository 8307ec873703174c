"""DESIGN.md's safety invariants 1-3 through the HTTP API, and Kleppmann's figure.

Invariant 4 (a lost storage outcome is 503) needs a database that can be
stopped: see test_storage_down.py. Restarts by `kill -9` and replicas on one
PostgreSQL: see test_processes.py.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from lockclient.errors import StaleToken
from lockclient.http import GatewayClient
from tests.gateway.conftest import AppClient, Lease, MakeClient


def base_url(client: AppClient) -> str:
    return str(client.make_url("")).rstrip("/")


async def snapshot(client: AppClient, resource: str) -> tuple[int, dict[str, tuple[bytes, str, str]]]:
    """The resource's mark and every object's bytes, writer token and version."""
    mark = (await (await client.get(f"/v1/fences/{resource}")).json())["highest"]
    objects = {}
    for meta in (await (await client.get("/v1/objects")).json())["objects"]:
        resp = await client.get(f"/v1/objects/{meta['key']}")
        objects[meta["key"]] = (
            await resp.read(),
            resp.headers["Fencing-Token"],
            resp.headers["Object-Version"],
        )
    return mark, objects


async def test_invariant_1_accepted_tokens_never_decrease_in_commit_order(client: AppClient) -> None:
    rng = random.Random(1)
    tokens = [rng.randint(1, 60) for _ in range(120)]

    async def write(token: int) -> tuple[int, int] | None:
        resp = await client.put(
            "/v1/objects/inv1", data=str(token).encode(), headers={"Fencing-Token": str(token)}
        )
        if resp.status == 409:
            return None
        assert resp.status in (200, 201)
        body = await resp.json()
        return body["version"], body["token"]

    accepted = [r for r in await asyncio.gather(*(write(t) for t in tokens)) if r is not None]
    in_commit_order = [token for _, token in sorted(accepted)]
    assert len(accepted) >= 2
    assert in_commit_order == sorted(in_commit_order)
    assert (await (await client.get("/v1/fences/inv1")).json())["highest"] == max(tokens)


@pytest.mark.parametrize("method", ["PUT", "DELETE", "GET"])
async def test_invariant_2_a_stale_request_changes_no_byte(client: AppClient, method: str) -> None:
    for key in ("a", "b"):
        await client.put(f"/v1/objects/inv2/{key}", data=key.encode() * 3, headers={
            "Fencing-Token": "50", "Fencing-Resource": "inv2"})  # fmt: skip
    before = await snapshot(client, "inv2")
    resp = await client.request(
        method,
        "/v1/objects/inv2/a",
        data=b"stale",
        headers={"Fencing-Token": "49", "Fencing-Resource": "inv2"},
    )
    assert resp.status == 409
    assert await snapshot(client, "inv2") == before


async def test_invariant_3_the_mark_never_decreases_across_restarts(
    make_client: MakeClient, tmp_path: Path
) -> None:
    first = await make_client()
    marks = []
    for token in (5, 9, 7, 9, 3, 12):
        await first.put("/v1/objects/inv3", data=b"x", headers={"Fencing-Token": str(token)})
        marks.append((await (await first.get("/v1/fences/inv3")).json())["highest"])
    await first.close()
    second = await make_client()
    marks.append((await (await second.get("/v1/fences/inv3")).json())["highest"])
    resp = await second.put("/v1/objects/inv3", data=b"x", headers={"Fencing-Token": "11"})
    marks.append((await (await second.get("/v1/fences/inv3")).json())["highest"])
    assert resp.status == 409
    assert marks == [5, 9, 9, 9, 9, 12, 12, 12]


async def test_kleppmann_figure_paused_holder_is_refused_and_the_newer_bytes_stay(client: AppClient) -> None:
    """Client 1 takes token 33 and pauses (GC); its lease expires; client 2 takes 34 and writes;
    client 1 resumes and writes with 33: refused 409, the object holds client 2's bytes."""
    url = base_url(client)
    paused = asyncio.Event()
    resumed = asyncio.Event()

    async def client_1() -> None:
        lease = Lease(token=33, resource="file")
        async with GatewayClient(url) as gw:
            paused.set()
            await resumed.wait()  # the stop-the-world pause, past the lease's expiry
            with pytest.raises(StaleToken) as refused:
                await gw.put("file", b"client 1 (stale)", lease=lease)
            assert (refused.value.token, refused.value.highest, refused.value.status) == (33, 34, 409)

    async def client_2() -> None:
        await paused.wait()
        async with GatewayClient(url) as gw:
            info = await gw.put("file", b"client 2", lease=Lease(token=34, resource="file"))
            assert info.token == 34
        resumed.set()

    await asyncio.gather(client_1(), client_2())
    async with GatewayClient(url) as gw:
        stored = await gw.get("file")
    assert (stored.data, stored.token) == (b"client 2", 34)


async def test_a_fenced_read_protects_read_modify_write(client: AppClient) -> None:
    """The new holder reads under token 8; the old holder's late write with 7 is then refused."""
    await client.put("/v1/objects/rmw", data=b"1", headers={"Fencing-Token": "7"})
    read = await client.get("/v1/objects/rmw", headers={"Fencing-Token": "8"})
    assert (read.status, await read.read()) == (200, b"1")
    late = await client.put("/v1/objects/rmw", data=b"2 (old holder)", headers={"Fencing-Token": "7"})
    assert late.status == 409
    assert await (await client.put("/v1/objects/rmw", data=b"2", headers={"Fencing-Token": "8"})).json() == {
        "key": "rmw", "resource": "rmw", "token": 8, "version": 2, "size": 1}  # fmt: skip
