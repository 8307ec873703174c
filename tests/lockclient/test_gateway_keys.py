"""`GatewayClient` sends the key it was given, exactly, or nothing.

A URL resolves `.` and `..` segments (yarl did so before sending), so
`put("cl/x/../victim")` wrote `cl/victim`. Such a key is refused by the
client itself (`ConfigurationError`), async and blocking, and every other key
reaches the gateway as named. Against a served gateway and real masters.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

import lockclient.sync
from fencegate.lab.cluster import LocalCluster
from gateway import Settings, create_app
from lockclient import ConfigurationError, GatewayClient, Redlock, SQLiteTokens
from lockclient.lease import Lease

DOT_SEGMENT = r"'\.' or '\.\.' segment"


def dotted(resource: str) -> list[str]:
    """Keys that a URL would resolve to another key (`victim`, the resource itself, or above it)."""
    return [
        f"{resource}/x/../victim",
        f"{resource}/./victim",
        f"{resource}/victim/.",
        f"{resource}/victim/..",
        f"{resource}/x/y/../../victim",
        "..",
        ".",
    ]


def exact(resource: str) -> list[str]:
    """Keys the gateway takes that URL encoding could alter: dots inside names, `%`, sub-delimiters."""
    return sorted(
        f"{resource}/{name}"
        for name in (".hidden", "..x", "x..", "a%2Fb", "a%2E%2E", "100%", "a:b@c=d+e,f~g", "victim.")
    )


async def _served(aiohttp_client: Any, tmp_path: Path) -> str:
    client = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw")))
    return str(client.server.make_url(""))


async def test_a_key_with_a_dot_segment_is_refused_and_writes_nothing(
    redis_cluster: LocalCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    resource = f"gk-{uuid.uuid4().hex[:10]}"
    victim = f"{resource}/victim"
    async with (
        GatewayClient(await _served(aiohttp_client, tmp_path)) as gateway,
        Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker,
        locker.lock(resource, ttl=10.0) as lease,
    ):
        await gateway.put(victim, b"original", lease=lease)
        for key in dotted(resource):
            with pytest.raises(ConfigurationError, match=DOT_SEGMENT):
                await gateway.put(key, b"overwritten", lease=lease)
            with pytest.raises(ConfigurationError, match=DOT_SEGMENT):
                await gateway.delete(key, lease=lease)
            with pytest.raises(ConfigurationError, match=DOT_SEGMENT):
                await gateway.get(key, lease=lease)
            with pytest.raises(ConfigurationError, match=DOT_SEGMENT):
                await gateway.fence(key)
        read = await gateway.get(victim)
        assert (read.data, read.version) == (b"original", 1)  # neither overwritten nor deleted
        assert [info.key for info in await gateway.list(resource)] == [victim]


async def test_every_other_key_reaches_the_gateway_exactly_as_named(
    redis_cluster: LocalCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    resource = f"gk-{uuid.uuid4().hex[:10]}"
    async with (
        GatewayClient(await _served(aiohttp_client, tmp_path)) as gateway,
        Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker,
        locker.lock(resource, ttl=10.0) as lease,
    ):
        for key in exact(resource):
            written = await gateway.put(key, key.encode(), lease=lease)
            assert written.key == key
        assert [info.key for info in await gateway.list(resource)] == exact(resource)
        for key in exact(resource):
            assert (await gateway.get(key, lease=lease)).data == key.encode()
        assert await gateway.fence(resource) == lease.token


def _blocking(url: str, masters: list[str], tokens: Path, resource: str) -> dict[str, object]:
    """The blocking client's answers: each dotted key refused, then what the store holds."""
    seen: dict[str, object] = {}
    victim = f"{resource}/victim"
    with (
        lockclient.sync.GatewayClient(url) as gateway,
        lockclient.sync.Redlock(masters, tokens=SQLiteTokens(tokens)) as locker,
        locker.lock(resource, ttl=10.0) as lease,
    ):
        gateway.put(victim, b"original", lease=lease)
        refused = []
        for key in dotted(resource):
            for name, call in _calls(gateway, key, lease).items():
                try:
                    call()
                except ConfigurationError as exc:
                    refused.append((name, "segment" in str(exc)))
        seen["refused"] = refused
        seen["victim"] = gateway.get(victim).data
        seen["listed"] = [info.key for info in gateway.list(resource)]
    return seen


def _calls(gateway: lockclient.sync.GatewayClient, key: str, lease: Lease[int]) -> dict[str, Any]:
    return {
        "put": lambda: gateway.put(key, b"overwritten", lease=lease),
        "delete": lambda: gateway.delete(key, lease=lease),
        "get": lambda: gateway.get(key),
        "fence": lambda: gateway.fence(key),
    }


async def test_the_blocking_client_refuses_a_key_with_a_dot_segment_too(
    redis_cluster: LocalCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    url = await _served(aiohttp_client, tmp_path)
    resource = f"gk-{uuid.uuid4().hex[:10]}"
    seen = await asyncio.to_thread(_blocking, url, redis_cluster.redis_urls, tmp_path / "t.db", resource)
    assert seen == {
        "refused": [(name, True) for _ in dotted(resource) for name in ("put", "delete", "get", "fence")],
        "victim": b"original",
        "listed": [f"{resource}/victim"],
    }


@pytest.mark.parametrize("bad", ["", 7, None], ids=repr)
async def test_a_key_that_is_not_a_non_empty_str_is_refused_before_anything_is_sent(bad: object) -> None:
    async with GatewayClient("http://127.0.0.1:9") as gateway:  # nothing listens: a send would fail otherwise
        with pytest.raises(ConfigurationError, match="must be a non-empty string"):
            await gateway.put(bad, b"x", token=1)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="must be a non-empty string"):
            await gateway.get(bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="must be a non-empty string"):
            await gateway.fence(bad)  # type: ignore[arg-type]
