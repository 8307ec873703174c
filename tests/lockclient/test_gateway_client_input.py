"""`GatewayClient` refuses what the gateway would refuse, before sending anything.

A token outside 1..2^63-1 (or not an int), a resource or idempotency key the API cannot read, data
that is not bytes, and a timeout that is not a positive finite number are refused with
`ConfigurationError`; a local HTTP server records every request that reaches it (none). The client's
resource rule agrees with the gateway's on every name.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from aiohttp import web

from lockclient import ConfigurationError, GatewayClient


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
