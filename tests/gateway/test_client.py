"""`GatewayClient` against a real app: headers from the lease, typed errors."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest

from lockclient.errors import ConfigurationError, GatewayError, StaleToken
from lockclient.http import GatewayClient
from tests.gateway.conftest import AppClient, Lease


@pytest.fixture
async def gw(client: AppClient) -> AsyncIterator[GatewayClient]:
    gateway = GatewayClient(str(client.make_url("")).rstrip("/"))
    yield gateway
    await gateway.aclose()


async def test_lease_sends_token_and_resource(gw: GatewayClient) -> None:
    info = await gw.put("orders/1", b"v1", lease=Lease(token=12, resource="orders"))
    assert (info.key, info.resource, info.token, info.version, info.size, info.created) == (
        "orders/1", "orders", 12, 1, 2, True)  # fmt: skip
    assert await gw.fence("orders") == 12
    assert await gw.fence("orders/1") == 0


async def test_stale_token_carries_the_mark(gw: GatewayClient) -> None:
    await gw.put("k", b"new", lease=Lease(token=20, resource="r"))
    with pytest.raises(StaleToken) as caught:
        await gw.delete("k", lease=Lease(token=19, resource="r"))
    assert (caught.value.resource, caught.value.token, caught.value.highest, caught.value.code) == (
        "r", 19, 20, "stale_token")  # fmt: skip
    assert (await gw.get("k")).data == b"new"


async def test_other_errors_are_gateway_errors_with_status_and_code(gw: GatewayClient) -> None:
    with pytest.raises(GatewayError) as caught:
        await gw.get("missing")
    assert (caught.value.status, caught.value.code) == (404, "not_found")
    assert not isinstance(caught.value, StaleToken)


async def test_get_delete_list_round_trip(gw: GatewayClient) -> None:
    lease = Lease(token=3, resource="L")
    for i in range(3):
        await gw.put(f"list/{i}", b"x" * i, lease=lease)
    fetched = await gw.get("list/2", lease=lease)
    assert (fetched.data, fetched.token, fetched.version) == (b"xx", 3, 1)
    assert [o.key for o in await gw.list("list/")] == ["list/0", "list/1", "list/2"]
    deleted = await gw.delete("list/0", lease=lease)
    assert deleted.version == 1
    assert [o.key for o in await gw.list("list/")] == ["list/1", "list/2"]


async def test_a_write_without_a_lease_is_refused_before_sending(gw: GatewayClient) -> None:
    with pytest.raises(ConfigurationError, match="lease="):
        await gw.put("k", b"x")


async def test_unreachable_gateway_is_a_gateway_error_with_unknown_outcome() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with GatewayClient(f"http://127.0.0.1:{port}") as gw:
        with pytest.raises(GatewayError) as caught:
            await gw.put("k", b"x", token=1)
    assert (caught.value.status, caught.value.code) == (None, "unreachable")


@pytest.mark.parametrize("if_match", ['W/"a"', "a", '"a", "b"', '"a'])
async def test_an_if_match_that_is_not_one_strong_etag_is_refused_before_anything_is_sent(
    gw: GatewayClient, if_match: str
) -> None:
    with pytest.raises(ConfigurationError, match="if_match"):
        await gw.put("k", b"v", token=3, if_match=if_match)
    with pytest.raises(ConfigurationError, match="if_match"):
        await gw.delete("k", token=3, if_match=if_match)
    assert await gw.fence("k") == 0  # nothing reached the gateway
