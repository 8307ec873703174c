"""Who a request is: only `Bearer` with the whole secret authenticates, and no header renames the client.

On real gateways: every other scheme or a partial secret is 401, a comma list of credentials is 400 as
two headers are, and forwarding headers do not change the client the logs and the audit trail name.
A refused request moves no mark.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gateway.auth import hash_secret
from tests.gateway.conftest import AppClient, MakeClient
from tests.gateway.test_headers import send
from tests.gateway.test_key_files import SECRET, entry, key_file


async def fence(client: AppClient, resource: str, auth: dict[str, str]) -> int:
    answer = await client.get(f"/v1/fences/{resource}", headers=auth)
    assert answer.status == 200, await answer.text()
    highest: int = (await answer.json())["highest"]
    return highest


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (f"Bearer {SECRET}", 201),
        (f"bearer {SECRET}", 201),  # the scheme is case-insensitive (RFC 9110)
        (f"BEARER  {SECRET} ", 201),
        (f"Basic {SECRET}", 401),
        (f"Token {SECRET}", 401),
        (SECRET, 401),
        ("Bearer", 401),
        ("Bearer ", 401),
        (f"Bearer\t{SECRET}", 401),
        (f"Bearer {SECRET} {SECRET}", 401),
        (f"Bearer {SECRET}, Bearer {SECRET}", 400),  # two credentials (RFC 9110): see below
        (f"Bearer {SECRET},", 400),
        (f"Bearer {SECRET.upper()}", 401),  # the secret is compared exactly
        (f"Bearer {SECRET[:-1]}", 401),
        (f"Bearer {hash_secret(SECRET)}", 401),  # what the key file holds lets nobody in
    ],
)
async def test_only_a_bearer_scheme_with_the_whole_secret_authenticates(
    make_client: MakeClient, tmp_path: Path, authorization: str, status: int
) -> None:
    client = await make_client(api_keys=key_file(tmp_path / "keys.json", entry()))
    answer, body = await send(
        client, "PUT", "/v1/objects/bill/1", [("Authorization", authorization), ("Fencing-Token", "1")], b"x"
    )
    assert answer == status, body
    marks = await fence(client, "bill/1", {"Authorization": f"Bearer {SECRET}"})
    assert marks == (1 if status == 201 else 0)  # a refused request moved nothing


@pytest.mark.parametrize(
    "authorization",
    [f"Bearer {SECRET}, Bearer {SECRET}", f"Bearer {SECRET}, Bearer other", f"Bearer other, Bearer {SECRET}"],
)
async def test_authorization_as_a_comma_list_is_400_as_two_headers_are(
    make_client: MakeClient, tmp_path: Path, authorization: str
) -> None:
    """Authorization is a singleton field (RFC 9110): a comma list is two credentials, as a proxy makes
    of two headers, and no bearer secret holds a comma. docs/security.md promised 400 like two headers
    get; it was 401 `unknown API key`, which tells a client to fetch another key, not to send one."""
    client = await make_client(api_keys=key_file(tmp_path / "keys.json", entry()))
    for method in ("PUT", "DELETE", "GET"):
        headers = [("Authorization", authorization), ("Fencing-Token", "1")]
        status, body = await send(client, method, "/v1/objects/bill/1", headers, b"x")
        assert (status, body["error"]) == (400, "bad_request"), body
        detail = str(body["detail"])
        assert "Authorization holds a comma" in detail
        assert "send exactly one, `Authorization: Bearer <key>`" in detail
        assert SECRET not in detail  # the answer does not echo a credential
    assert await fence(client, "bill/1", {"Authorization": f"Bearer {SECRET}"}) == 0  # nothing written


async def test_forwarding_headers_do_not_rename_the_client(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The identity (logs, audit trail, per-client limit) of an open gateway is the peer address; a
    client cannot pick another one, nor hide among others, with X-Forwarded-For or Forwarded."""
    client = await make_client()
    spoofed = {"X-Forwarded-For": "10.9.9.9", "Forwarded": "for=10.9.9.9", "X-Real-IP": "10.9.9.9"}
    with caplog.at_level(logging.WARNING, logger="gateway.refusals"):
        refused = await client.put("/v1/objects/spoof", data=b"x", headers=spoofed)  # no token: 428
    assert refused.status == 428
    record = json.loads(caplog.records[-1].getMessage().removeprefix("refused "))
    assert record["client"] == "ip:127.0.0.1"


async def test_two_authorization_headers_name_no_key_even_when_the_first_would(
    make_client: MakeClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The request is 400, and the refusal's log (as its per-client slot) names the peer address: an
    unauthenticated request is counted as nobody's key."""
    client = await make_client(api_keys=key_file(tmp_path / "keys.json", entry()))
    two = [("Authorization", f"Bearer {SECRET}"), ("Authorization", "Bearer other")]
    headers = [*two, ("Fencing-Token", "1")]
    with caplog.at_level(logging.WARNING, logger="gateway.refusals"):
        status, body = await send(client, "PUT", "/v1/objects/bill/1", headers, b"x")
    assert (status, body["error"]) == (400, "bad_request"), body
    record = json.loads(caplog.records[-1].getMessage().removeprefix("refused "))
    assert record["client"] == "ip:127.0.0.1"
    assert await fence(client, "bill/1", {"Authorization": f"Bearer {SECRET}"}) == 0  # nothing written
