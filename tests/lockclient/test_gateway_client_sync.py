"""`lockclient.sync.GatewayClient` does what the async client does, from plain threads.

The gateway is served on the test's loop; the blocking client runs in a worker
thread (`asyncio.to_thread`) with a lease of `lockclient.sync.Redlock`.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from fencegate.lab.cluster import LocalCluster
from gateway import Settings, create_app
from lockclient import (
    ConfigurationError,
    GatewayError,
    GatewayRetry,
    IdempotencyKeyReused,
    LockLost,
    NotFound,
    OutcomeUnknown,
    SQLiteTokens,
    StaleToken,
)
from lockclient.sync import GatewayClient, Redlock


def _session(url: str, masters: list[str], tokens: Path, resource: str) -> dict[str, Any]:
    """What a blocking program sees doing the async client's calls, in order."""
    seen: dict[str, Any] = {}
    key = f"{resource}/doc"
    with GatewayClient(url) as gateway, Redlock(masters, tokens=SQLiteTokens(tokens)) as locker:
        with pytest.raises(NotFound):
            gateway.get(key)
        with locker.lock(resource, ttl=10.0) as old:
            pass
        with locker.lock(resource, ttl=10.0) as lease:
            created = gateway.put(key, b"one", lease=lease)
            seen["created"] = (created.created, created.version, created.token == lease.token)
            read = gateway.get(key, lease=lease)
            seen["read"] = (read.data, read.token == lease.token, read.version)
            seen["listed"] = [info.key for info in gateway.list(resource)]
            seen["fence"] = gateway.fence(resource) == lease.token
            with pytest.raises(StaleToken) as stale:
                gateway.put(key, b"old", token=old.token, resource=resource)  # a late writer
            seen["stale"] = (stale.value.token == old.token, stale.value.highest == lease.token)
            gateway.put(key, b"two", lease=lease, idempotency_key="k1")
            with pytest.raises(IdempotencyKeyReused):
                gateway.put(key, b"three", lease=lease, idempotency_key="k1")
            deleted = gateway.delete(key, lease=lease)
            seen["deleted"] = deleted.version
        with pytest.raises(LockLost):
            gateway.put(key, b"late", lease=lease)  # released: nothing is sent
        with pytest.raises(NotFound):
            gateway.get(key)
    return seen


async def test_the_blocking_client_answers_as_the_async_one(
    redis_cluster: LocalCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    served = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw")))
    url = str(served.server.make_url(""))
    resource = f"gs-{uuid.uuid4().hex[:10]}"
    seen = await asyncio.to_thread(_session, url, redis_cluster.redis_urls, tmp_path / "t.db", resource)
    assert seen == {
        "created": (True, 1, True),
        "read": (b"one", True, 1),
        "listed": [f"{resource}/doc"],
        "fence": True,
        "stale": (True, True),
        "deleted": 2,
    }


@pytest.mark.parametrize(
    "url",
    ["http://", "http://:8080", "http://127.0.0.1:99999", "http://127.0.0.1:0", "http://[::1", "ftp://h:1"],
)
def test_a_base_url_that_could_never_be_sent_to_is_refused_at_once(url: str) -> None:
    """Not a client that later calls every request an unknown outcome and retries it."""
    with pytest.raises(ConfigurationError, match="a host and a port from 1 to 65535"):
        GatewayClient(url)


def test_the_blocking_client_checks_its_arguments_and_reports_an_unreachable_gateway(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigurationError):
        GatewayClient("127.0.0.1:8080")
    with pytest.raises(ConfigurationError):
        GatewayClient("http://127.0.0.1:8080", retry=GatewayRetry(attempts=0))
    with (
        GatewayClient("http://127.0.0.1:9", retry=GatewayRetry(attempts=2, delay=0.0)) as gone,
        pytest.raises(GatewayError) as down,
    ):
        gone.put("k", b"x", token=1)
    assert down.value.code == "unreachable"
    assert not isinstance(down.value, OutcomeUnknown)  # refused: nothing was sent
