"""`GatewayClient` reads the integers a server states in ASCII decimal only, and never fails on one.

`Fencing-Token`, `Object-Version` and `Retry-After` come from the gateway, or from whatever answers at
its address (a proxy, an upstream in proxy mode): `str.isdigit()` took `²`, which `int()` then
refused with a ValueError, and digits of every script (full-width, Arabic-Indic) were read as
numbers. A real HTTP server here answers with such headers.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from lockclient import GatewayClient, TooManyRequests

ODD = ["²", "\uff15", "١٢", "+5", "-1", "05", "1e3", "9" * 5000, ""]


def _server(headers: dict[str, str], status: int = 200) -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        body = b'{"code": "too_many_requests", "detail": "slow down"}' if status == 429 else b"data"
        return web.Response(status=status, body=body, headers=headers)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    return app


@pytest.mark.parametrize("odd", ODD, ids=repr)
async def test_an_odd_token_or_version_header_reads_as_not_stated(aiohttp_client: Any, odd: str) -> None:
    served = await aiohttp_client(_server({"Fencing-Token": odd, "Object-Version": odd}))
    async with GatewayClient(str(served.server.make_url(""))) as gateway:
        got = await gateway.get("k")
    assert got.data == b"data"
    assert (got.token, got.version) == (None, None)


async def test_a_plain_token_and_version_are_read(aiohttp_client: Any) -> None:
    served = await aiohttp_client(_server({"Fencing-Token": "9223372036854775807", "Object-Version": "0"}))
    async with GatewayClient(str(served.server.make_url(""))) as gateway:
        got = await gateway.get("k")
    assert (got.token, got.version) == (2**63 - 1, 0)


@pytest.mark.parametrize(("stated", "read"), [("3", 3.0), ("²", None), ("\uff15", None), ("9" * 5000, None)])
async def test_retry_after_is_read_only_as_ascii_seconds(
    aiohttp_client: Any, stated: str, read: float | None
) -> None:
    served = await aiohttp_client(_server({"Retry-After": stated}, status=429))
    async with GatewayClient(str(served.server.make_url("")), retry=None) as gateway:
        with pytest.raises(TooManyRequests) as refused:
            await gateway.get("k")
    assert refused.value.retry_after == read
