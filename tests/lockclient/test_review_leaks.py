"""What a review found: passwords in reprs and reasons, and a gateway client that sent what it should refuse.

A master's URL with a login put its password in `repr(lease)`, in the keys of
`Lease.nodes` and in `LockNotAcquired.reasons` (all logged); a password with an
unencoded `#` showed its first part in the message refusing the URL; the
gateway client named its URL with the password when it could not connect.
`GatewayClient` sent tokens outside 1..2^63-1 (or not ints at all) and empty or
control-character resources, and took a timeout of 0 (aiohttp: none). Against
real Redis masters with an ACL login, and a local HTTP server that records
every request that reaches it.
"""

from __future__ import annotations

import math
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import (
    ConfigurationError,
    GatewayClient,
    GatewayError,
    LockNotAcquired,
    QuorumUnavailable,
    Redlock,
    RetryPolicy,
)

PASSWORD = "Sup3rS3cret-pw"
LOGIN = ("app", PASSWORD)


@pytest.fixture(scope="module")
def login_masters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Three masters that each take only the ACL user `app` with `PASSWORD`; their URLs carry it."""
    with LocalCluster.running(ClusterSpec(redis=0), tmp_path_factory.mktemp("login")) as cluster:
        urls = [cluster.add_redis(login=LOGIN).url for _ in range(3)]
        assert all(PASSWORD in url for url in urls)
        yield urls


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_lease_and_a_refusal_never_show_a_masters_password(login_masters: list[str]) -> None:
    resource = f"leak-{uuid.uuid4().hex[:8]}"
    shown = [url.replace(f"app:{PASSWORD}@", "") for url in login_masters]
    async with Redlock(login_masters, ttl=10.0) as holder, Redlock(login_masters, ttl=10.0) as other:
        lease = await holder.acquire(resource)
        try:
            assert PASSWORD not in repr(lease)
            assert list(lease.nodes) == shown
            assert lease.nodes[login_masters[0]] == lease.nodes[shown[0]] == "ok"  # either name finds it
            with pytest.raises(LockNotAcquired) as refused:
                await other.acquire(resource, blocking=False)
            assert PASSWORD not in f"{refused.value} {refused.value.reasons!r}"
            assert set(refused.value.reasons) == set(shown)
            assert all(why.startswith("refused") for why in refused.value.reasons.values())
        finally:
            await holder.release(lease)


async def test_an_unreachable_quorum_never_shows_a_masters_password(login_masters: list[str]) -> None:
    down = [f"redis://app:{PASSWORD}@127.0.0.1:{_closed_port()}" for _ in range(2)]
    async with Redlock([login_masters[0], *down], retry=RetryPolicy(unreachable=0)) as locker:
        with pytest.raises(QuorumUnavailable) as caught:
            await locker.acquire(f"leak-{uuid.uuid4().hex[:8]}", blocking=False)
    error = caught.value
    assert PASSWORD not in f"{error} {error.reasons!r} {error.unreachable!r}"
    assert error.unreachable == tuple(url.replace(f"app:{PASSWORD}@", "") for url in down)
    assert all(error.reasons[url] != "ok" for url in error.unreachable)


@pytest.mark.parametrize("cut", ["#", "?"])
def test_a_password_with_an_unencoded_fragment_or_query_mark_is_masked(cut: str) -> None:
    url = f"redis://:{PASSWORD}{cut}more@127.0.0.1:1"
    with pytest.raises(ConfigurationError) as refused:
        Redlock([url, "redis://127.0.0.1:2", "redis://127.0.0.1:3"])
    assert PASSWORD not in str(refused.value)
    assert PASSWORD[:6] not in str(refused.value)  # not even the part before the mark
    assert "redis://:***@127.0.0.1:1" in str(refused.value)


async def test_a_gateway_that_cannot_be_reached_is_named_without_its_password() -> None:
    port = _closed_port()
    async with GatewayClient(f"http://alice:{PASSWORD}@127.0.0.1:{port}", retry=None) as gateway:
        with pytest.raises(GatewayError) as caught:
            await gateway.fence("r")
    assert caught.value.code == "unreachable"
    assert PASSWORD not in str(caught.value)
    assert f"http://alice:***@127.0.0.1:{port}" in str(caught.value)


@pytest.mark.parametrize("timeout", [0, 0.0, -1.0, math.nan, math.inf])
def test_a_gateway_timeout_that_is_no_positive_number_of_seconds_is_refused(timeout: float) -> None:
    # aiohttp reads a total of 0 (or less) as no timeout: a hung gateway hung every call
    with pytest.raises(ConfigurationError, match="timeout must be a finite number > 0"):
        GatewayClient("http://127.0.0.1:8080", timeout=timeout)


def _recorder(seen: list[dict[str, str]]) -> web.Application:
    """A server that records every request's headers and accepts it as the gateway would."""

    async def answer(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        key = request.match_info["tail"].removeprefix("v1/objects/")
        resource = request.headers.get("Fencing-Resource", key)
        token = int(request.headers.get("Fencing-Token", "0"))
        info = {"key": key, "resource": resource, "token": token, "version": 1, "size": 1}
        return web.json_response(info, status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    return app


async def _gateway(aiohttp_client: Any, seen: list[dict[str, str]]) -> GatewayClient:
    served = await aiohttp_client(_recorder(seen))
    return GatewayClient(str(served.server.make_url("")), retry=None)


BAD_TOKENS = [-5, 0, 2**63, 2**64, True, False, 1.5, 12.0, "12", "12 ; x", b"12"]


@pytest.mark.parametrize("token", BAD_TOKENS, ids=repr)
async def test_a_token_outside_the_api_range_is_refused_and_nothing_is_sent(
    aiohttp_client: Any, token: Any
) -> None:
    seen: list[dict[str, str]] = []
    async with await _gateway(aiohttp_client, seen) as gateway:
        with pytest.raises(ConfigurationError, match=r"token must be an int from 1 to 2\*\*63-1"):
            await gateway.put("k", b"x", token=token, resource="r")
        with pytest.raises(ConfigurationError, match=r"token must be an int from 1 to 2\*\*63-1"):
            await gateway.delete("k", token=token)
        with pytest.raises(ConfigurationError, match=r"token must be an int from 1 to 2\*\*63-1"):
            await gateway.get("k", token=token)
    assert seen == []


BAD_RESOURCES = [
    "",
    "r\r\nX-Evil: 1",
    "r\x00",
    "a,b",
    "a b",
    "a//b",
    "/a",
    "a/",
    "a/../b",
    ".",
    "é",
    "r" * 257,
]


@pytest.mark.parametrize("resource", [*BAD_RESOURCES, 7, b"r"], ids=repr)
async def test_a_resource_the_api_cannot_read_is_refused_and_nothing_is_sent(
    aiohttp_client: Any, resource: Any
) -> None:
    seen: list[dict[str, str]] = []
    async with await _gateway(aiohttp_client, seen) as gateway:
        with pytest.raises(ConfigurationError, match="resource"):
            await gateway.put("k", b"x", token=1, resource=resource)
        with pytest.raises(ConfigurationError, match="resource"):
            await gateway.get("k", token=1, resource=resource)
    assert seen == []


@pytest.mark.parametrize("data", ["text", 12, None, [1, 2]], ids=repr)
async def test_data_that_is_not_bytes_is_refused_and_nothing_is_sent(aiohttp_client: Any, data: Any) -> None:
    seen: list[dict[str, str]] = []
    async with await _gateway(aiohttp_client, seen) as gateway:
        with pytest.raises(ConfigurationError, match="data must be bytes"):
            await gateway.put("k", data, token=1)
    assert seen == []


@pytest.mark.parametrize("once", ["a\r\nX-Evil: 1", "", "a b", "a,b", "k" * 129, "é"], ids=repr)
async def test_an_idempotency_key_the_api_cannot_read_is_refused_and_nothing_is_sent(
    aiohttp_client: Any, once: str
) -> None:
    seen: list[dict[str, str]] = []
    async with await _gateway(aiohttp_client, seen) as gateway:
        with pytest.raises(ConfigurationError, match="idempotency_key"):
            await gateway.put("k", b"x", token=1, idempotency_key=once)
    assert seen == []


async def test_the_token_range_is_exact_and_every_name_the_api_reads_is_still_sent(
    aiohttp_client: Any,
) -> None:
    seen: list[dict[str, str]] = []
    resource = "a-Z_0.9~:@=+%/b/..c/c.."
    async with await _gateway(aiohttp_client, seen) as gateway:
        await gateway.put("k", b"x", token=1, resource=resource)
        await gateway.put("k", b"x", token=2**63 - 1, resource="r" * 256, idempotency_key="k" * 128)
        with pytest.raises(ConfigurationError, match="token must be an int"):  # one past the last
            await gateway.put("k", b"x", token=2**63, resource="r")
        with pytest.raises(ConfigurationError, match="resource"):  # one character too long
            await gateway.put("k", b"x", token=1, resource="r" * 257)
    assert [(s["Fencing-Token"], s["Fencing-Resource"]) for s in seen] == [
        ("1", resource),
        (str(2**63 - 1), "r" * 256),
    ]
