"""`GatewayClient` names the lease's resource on every request; a bare token binds the key to itself.

Against a served gateway (SQLite storage) and real Redis masters.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from fencegate.lab.cluster import LocalCluster
from gateway import Settings, create_app
from lockclient import (
    BadRequest,
    GatewayClient,
    GatewayRetry,
    IdempotencyKeyReused,
    NotFound,
    Redlock,
    ResourceMismatch,
    SQLiteTokens,
    TokenFromTheFuture,
)


async def _gateway(aiohttp_client: Any, tmp_path: Path) -> GatewayClient:
    client = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw")))
    return GatewayClient(str(client.server.make_url("")))


async def test_every_request_with_a_lease_names_its_resource(
    redis_cluster: LocalCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    resource = f"gc-{uuid.uuid4().hex[:10]}"
    key = f"{resource}/42"  # a key under the lock, not the lock's own name
    async with (
        await _gateway(aiohttp_client, tmp_path) as gateway,
        Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker,
        locker.lock(resource, ttl=10.0) as lease,
    ):
        written = await gateway.put(key, b"one", lease=lease)
        assert (written.resource, written.token) == (resource, lease.token)
        assert (await gateway.get(key, lease=lease)).data == b"one"  # a fenced read of the same resource
        await gateway.delete(key, lease=lease)
        again = await gateway.put(key, b"two", lease=lease)  # a recreate stays under the lease's resource
        assert again.resource == resource
        assert await gateway.fence(resource) == lease.token
        # the same token without the resource names the key itself: the key is not that resource's
        with pytest.raises(ResourceMismatch) as refused:
            await gateway.put(key, b"bare", token=lease.token)
        assert (refused.value.status, refused.value.code) == (409, "resource_mismatch")
        assert (refused.value.key, refused.value.resource, refused.value.object_resource) == (
            key,
            key,
            resource,
        )
        assert (await gateway.get(key)).data == b"two"  # the refused write changed nothing


async def test_a_bare_token_binds_the_key_to_a_resource_of_its_own_name(
    redis_cluster: LocalCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    resource = f"gc-{uuid.uuid4().hex[:10]}"
    key = f"{resource}/7"
    async with (
        await _gateway(aiohttp_client, tmp_path) as gateway,
        Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker,
        locker.lock(resource, ttl=10.0) as lease,
    ):
        bare = await gateway.put(key, b"bare", token=lease.token)
        assert bare.resource == key
        with pytest.raises(ResourceMismatch) as refused:  # for good: the lease's resource cannot take it over
            await gateway.put(key, b"leased", lease=lease)
        assert (refused.value.status, refused.value.code) == (409, "resource_mismatch")
        assert (await gateway.get(key)).data == b"bare"


async def test_each_error_code_is_its_own_exception(
    redis_cluster: LocalCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    resource = f"gc-{uuid.uuid4().hex[:10]}"
    path = tmp_path / "tokens.db"
    app = create_app(Settings(data_dir=tmp_path / "gw"), tokens=SQLiteTokens(path))
    served = await aiohttp_client(app)
    async with (
        GatewayClient(str(served.server.make_url(""))) as gateway,
        Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(path)) as locker,
        locker.lock(resource, ttl=10.0) as lease,
    ):
        with pytest.raises(NotFound) as missing:  # a fresh store: the first fenced read of a key
            await gateway.get(f"{resource}/new", lease=lease)
        assert isinstance(missing.value, LookupError)
        assert (missing.value.status, missing.value.code) == (404, "not_found")
        assert await gateway.fence(resource) == lease.token  # the fenced read raised the mark all the same
        with pytest.raises(TokenFromTheFuture) as future:
            await gateway.put(f"{resource}/a", b"x", token=lease.token + 1000, resource=resource)
        assert (future.value.resource, future.value.token) == (resource, lease.token + 1000)
        assert future.value.bound < lease.token + 1000
        with pytest.raises(BadRequest) as malformed:
            await gateway.put(f"{resource}//a", b"x", lease=lease)
        assert isinstance(malformed.value, ValueError)
        assert (malformed.value.status, malformed.value.code) == (400, "bad_request")
        with pytest.raises(NotFound):
            await gateway.get(f"{resource}/a")  # neither refused write changed anything


async def test_a_retried_write_with_its_idempotency_key_is_applied_once(
    redis_cluster: LocalCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    resource = f"gc-{uuid.uuid4().hex[:10]}"
    key = f"{resource}/1"
    once = uuid.uuid4().hex
    async with (
        await _gateway(aiohttp_client, tmp_path) as gateway,
        Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker,
        locker.lock(resource, ttl=10.0) as lease,
    ):
        first = await gateway.put(key, b"once", lease=lease, idempotency_key=once)
        again = await gateway.put(key, b"once", lease=lease, idempotency_key=once)  # the retry
        assert again.version == first.version  # answered from the first write, not written again
        with pytest.raises(IdempotencyKeyReused):  # the same key for another request is refused
            await gateway.put(key, b"other", lease=lease, idempotency_key=once)
        assert (await gateway.get(key)).data == b"once"


async def test_a_misspelt_keyword_is_refused_before_anything_is_sent() -> None:
    async with GatewayClient("http://127.0.0.1:9") as gateway:  # nothing listens: a send would fail otherwise
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "put": lambda: gateway.put("k", b"x", tokn=1),  # type: ignore[call-arg]
            "get": lambda: gateway.get("k", tokn=1),  # type: ignore[call-arg]
            "delete": lambda: gateway.delete("k", tokn=1),  # type: ignore[call-arg]
        }
        for name, call in calls.items():
            with pytest.raises(TypeError, match=rf"{name}\(\) got an unexpected keyword argument 'tokn'"):
                await call()


def test_a_retry_policy_takes_its_settings_by_name_only() -> None:
    """`GatewayRetry`'s fields are not in `RetryPolicy`'s order (max_delay before jitter), so a
    positional call written after one would set the other's field: both are keyword-only."""
    with pytest.raises(TypeError, match="positional"):
        GatewayRetry(4, 0.1, 2.0, 0.1)  # type: ignore[call-arg]
    named = GatewayRetry(attempts=2, jitter=0.0)
    assert (named.attempts, named.delay, named.max_delay, named.jitter) == (2, 0.1, 2.0, 0.0)
