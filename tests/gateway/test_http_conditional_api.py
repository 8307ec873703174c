"""The API in front of a conditional http upstream: writes, reads, deletes, refusals, read at the store.

One gateway (`--upstream-ordering conditional`) over the real HTTP store
(`tests.gateway.etag_upstream`) on a loopback port; what the store holds is
read straight from it.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from gateway.transport import TOMBSTONE_PREFIX
from tests.gateway.conftest import AppClient, MakeClient
from tests.gateway.etag_upstream import EtagUpstream


async def _gateway(make_client: MakeClient, aiohttp_server: Any) -> tuple[AppClient, str]:
    server = await aiohttp_server(EtagUpstream().app)
    base = str(server.make_url("")).rstrip("/")
    gateway = await make_client(upstream=f"{base}/o", upstream_ordering="conditional", upstream_timeout=5.0)
    return gateway, base


async def _held(base: str, key: str) -> bytes | None:
    async with aiohttp.ClientSession() as session, session.get(f"{base}/o/{key}") as answer:
        return None if answer.status == 404 else await answer.read()


async def test_writes_reads_and_a_delete_land_at_the_store_and_a_stale_token_changes_nothing(
    make_client: MakeClient, aiohttp_server: Any
) -> None:
    gateway, base = await _gateway(make_client, aiohttp_server)
    assert (await gateway.put("/v1/objects/k", data=b"v5", headers={"Fencing-Token": "5"})).status == 201
    assert (await gateway.put("/v1/objects/k", data=b"v6", headers={"Fencing-Token": "6"})).status == 200
    stale = await gateway.put("/v1/objects/k", data=b"v4", headers={"Fencing-Token": "4"})
    assert stale.status == 409
    assert (await stale.json())["error"] == "stale_token"
    assert await _held(base, "k") == b"v6"
    read = await gateway.get("/v1/objects/k")
    assert read.status == 200
    assert await read.read() == b"v6"
    assert read.headers["Fencing-Token"] == "6"
    assert (await gateway.delete("/v1/objects/k", headers={"Fencing-Token": "7"})).status in (200, 204)
    tombstone = await _held(base, "k")
    assert tombstone is not None
    assert tombstone.startswith(TOMBSTONE_PREFIX)  # the key is not free for a held older write
    assert (await gateway.get("/v1/objects/k")).status == 404
    assert (await gateway.delete("/v1/objects/k", headers={"Fencing-Token": "8"})).status == 404
    assert (await gateway.put("/v1/objects/k", data=b"v9", headers={"Fencing-Token": "9"})).status == 201
    assert await _held(base, "k") == b"v9"


async def test_readyz_states_the_mode_and_listing_and_idempotency_are_refused_by_name(
    make_client: MakeClient, aiohttp_server: Any
) -> None:
    gateway, base = await _gateway(make_client, aiohttp_server)
    ready = await gateway.get("/readyz")
    assert ready.status == 200
    assert (await ready.json())["upstream_ordering"] == "conditional"
    assert (
        'fencegate_upstream_ordering{mode="conditional"} 1.0' in await (await gateway.get("/metrics")).text()
    )
    listing = await gateway.get("/v1/objects")
    assert listing.status == 501
    retried = await gateway.put(
        "/v1/objects/k", data=b"v", headers={"Fencing-Token": "1", "Idempotency-Key": "once"}
    )
    assert retried.status == 501
    assert await _held(base, "k") is None  # refused before anything was sent
