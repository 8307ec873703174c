"""One value per header the gateway decides on; twice, or as a comma list, is 400 and changes nothing.

A proxy in front may join repeated header fields into a list, or keep the
first or the last: if it authorizes or routes on one token and the gateway
fences on another, they disagree on the request. So `Fencing-Token: 5` with
`Fencing-Token: 3`, or `Fencing-Token: 5, 3`, is refused, and so are the
same shapes of `Fencing-Resource`, `Idempotency-Key` and `Authorization`.
The requests are written byte for byte on a raw socket, so no client library
merges or drops a repeated header on the way.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gateway.auth import hash_secret
from tests.gateway.conftest import AppClient, MakeClient
from tests.gateway.test_limits import close, open_raw, read_answer

Headers = list[tuple[str, str]]


async def send(
    client: AppClient, method: str, path: str, headers: Headers, body: bytes = b""
) -> tuple[int, dict[str, object]]:
    reader, writer = await open_raw(client)
    lines = [f"{method} {path} HTTP/1.1", "Host: test", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    await writer.drain()
    try:
        return await read_answer(reader)
    finally:
        await close(writer)


TOKEN = [("Fencing-Token", "5")]
REFUSED = [
    ([("Fencing-Token", "5"), ("Fencing-Token", "3")], "Fencing-Token came 2 times"),
    ([("Fencing-Token", "3"), ("Fencing-Token", "5")], "Fencing-Token came 2 times"),
    ([("Fencing-Token", "5, 3")], "is a list"),
    ([("Fencing-Token", "5,3")], "is a list"),
    ([*TOKEN, ("Fencing-Resource", "a"), ("Fencing-Resource", "b")], "Fencing-Resource came 2 times"),
    ([*TOKEN, ("Fencing-Resource", "a,b")], "is a list"),
    ([*TOKEN, ("Fencing-Resource", "a, b")], "is a list"),
]
IDEMPOTENCY = [
    ([*TOKEN, ("Idempotency-Key", "k1"), ("Idempotency-Key", "k2")], "Idempotency-Key came 2 times"),
    ([*TOKEN, ("Idempotency-Key", "k1,k2")], "is a list"),
]


async def state(client: AppClient) -> tuple[object, ...]:
    read = await client.get("/v1/objects/dup")
    marks = [(await (await client.get(f"/v1/fences/{r}")).json())["highest"] for r in ("dup", "a", "b")]
    return read.status, await read.read(), read.headers.get("Object-Version"), *marks


@pytest.mark.parametrize(
    ("method", "headers", "detail"),
    [(method, *case) for method in ("PUT", "DELETE", "GET") for case in REFUSED]
    + [(method, *case) for method in ("PUT", "DELETE") for case in IDEMPOTENCY],  # a read has none
)
async def test_a_fencing_header_twice_or_as_a_list_is_400_and_changes_nothing(
    client: AppClient, method: str, headers: Headers, detail: str
) -> None:
    await client.put("/v1/objects/dup", data=b"before", headers={"Fencing-Token": "1"})
    before = await state(client)
    status, body = await send(
        client, method, "/v1/objects/dup", headers, b"after" if method == "PUT" else b""
    )
    assert (status, body["error"]) == (400, "bad_request"), body
    assert detail in str(body["detail"])
    assert await state(client) == before == (200, b"before", "1", 1, 0, 0)


async def test_one_value_each_is_accepted_and_a_key_may_hold_a_comma(client: AppClient) -> None:
    status, body = await send(client, "PUT", "/v1/objects/dup", [*TOKEN, ("Idempotency-Key", "k1")], b"v")
    assert status == 201, body
    status, body = await send(client, "PUT", "/v1/objects/x,y", TOKEN, b"v")  # the key is no header
    assert (status, body["resource"]) == (201, "x,y")
    assert await (await client.get("/v1/fences/x,y")).json() == {"resource": "x,y", "highest": 5}


async def test_authorization_twice_is_400_even_when_both_are_valid(
    make_client: MakeClient, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.json"
    entries = [{"name": n, "sha256": hash_secret(n + "-secret"), "prefixes": [""]} for n in ("alice", "bob")]
    keys.write_text(json.dumps({"keys": entries}))
    client = await make_client(api_keys=keys)
    alice, bob = ("Authorization", "Bearer alice-secret"), ("Authorization", "Bearer bob-secret")
    for pair in ([alice, alice], [alice, bob], [alice, ("Authorization", "Bearer wrong")]):
        status, body = await send(client, "PUT", "/v1/objects/auth", [*TOKEN, *pair], b"x")
        assert (status, body["error"]) == (400, "bad_request"), body
        assert "Authorization came 2 times" in str(body["detail"])
    status, body = await send(client, "GET", "/v1/fences/auth", [alice])
    assert (status, body) == (200, {"resource": "auth", "highest": 0})  # nothing was written


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip", gzip.compress(b"the whole intended object " * 6)),
        ("gzip", gzip.compress(b"the whole intended object " * 6)[:30]),  # cut short: inflates to a part
        ("gzip", b"abc"),  # not gzip at all: aiohttp's parser refuses it first, with its plain 400
        ("br", b"abc"),
    ],
    ids=["gzip", "truncated-gzip", "not-gzip", "br"],
)
async def test_a_compressed_body_is_refused_and_writes_nothing(
    client: AppClient, encoding: str, body: bytes
) -> None:
    """Stored bytes are the bytes sent: an inflated body cut short would be stored as a part of itself."""
    headers = {"Fencing-Token": "1", "Content-Encoding": encoding, "Connection": "close"}
    resp = await client.put("/v1/objects/zipped", data=body, headers=headers)
    assert resp.status == 400
    if resp.content_type == "application/json":
        assert (await resp.json())["error"] == "bad_request"
    assert (await client.get("/v1/objects/zipped")).status == 404
    assert await (await client.get("/v1/fences/zipped")).json() == {"resource": "zipped", "highest": 0}
    identity = {"Fencing-Token": "1", "Content-Encoding": "identity"}
    assert (await client.put("/v1/objects/zipped", data=b"x", headers=identity)).status == 201
