"""The whole flow on real parts: a Redlock lease, its token, the gateway's fence.

The lockclient tests show that whoever stalls holds the older token; these
show that the gateway then refuses exactly that holder, and that a real token
source bounds the tokens the gateway will take.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from fencegate.lab.cluster import LocalCluster
from gateway import Settings, create_app
from lockclient import GatewayClient, GatewayError, Redlock, SQLiteTokens, StaleToken
from tests.lockclient.conftest import StepClock


async def _gateway(aiohttp_client: Any, tmp_path: Path, tokens: SQLiteTokens | None = None) -> GatewayClient:
    client = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw"), tokens=tokens))
    return GatewayClient(str(client.server.make_url("")))


async def test_a_holder_paused_past_its_ttl_is_refused_and_the_new_holder_kept(
    redis_cluster: LocalCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    resource = f"e2e-{uuid.uuid4().hex[:10]}"
    path = tmp_path / "tokens.db"
    async with (
        await _gateway(aiohttp_client, tmp_path) as gateway,
        # the paused holder's clock stands still: it believes its lease is valid throughout
        Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(path), clock=StepClock(0.0)) as paused,
        Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(path)) as other,
    ):
        old = await paused.acquire(resource, ttl=0.3)
        await gateway.put(resource, b"before the pause", lease=old)
        new = await other.acquire(resource, ttl=5.0, timeout=10.0)  # granted once the old keys expire
        await gateway.put(resource, b"from the new holder", lease=new)
        old.check()  # from the inside the paused holder cannot tell it lost the lease
        with pytest.raises(StaleToken) as refused:
            await gateway.put(resource, b"from the paused holder", lease=old)
        assert (refused.value.token, refused.value.highest) == (old.token, new.token)
        assert (await gateway.get(resource)).data == b"from the new holder"
        assert await gateway.fence(resource) == new.token
        await other.release(new)


async def test_tokens_from_a_real_source_pass_and_a_token_from_the_future_is_refused(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    resource = f"e2e-{uuid.uuid4().hex[:10]}"
    path = tmp_path / "tokens.db"
    issuer = SQLiteTokens(path)
    async with await _gateway(aiohttp_client, tmp_path, tokens=SQLiteTokens(path)) as gateway:
        token = await issuer.next_token(resource)
        await gateway.put(resource, b"honest", token=token, resource=resource)
        with pytest.raises(GatewayError) as future:
            await gateway.put(resource, b"forged", token=2**62, resource=resource)
        assert (future.value.status, future.value.code) == (422, "token_from_the_future")
        assert await gateway.fence(resource) == token
        later = await issuer.next_token(resource)  # above the cached bound: the source is asked again
        await gateway.put(resource, b"honest again", token=later, resource=resource)
        assert (await gateway.get(resource)).data == b"honest again"
    await issuer.aclose()
