"""Every status code of DESIGN.md's table, with its JSON body, and the headers of accepted requests."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.auth import hash_secret
from gateway.config import DEFAULT_MAX_BODY
from gateway.openapi import document
from tests.gateway.conftest import AppClient, MakeClient

MAX_TOKEN = 2**63 - 1


async def put(
    client: AppClient, key: str, body: bytes, token: int | str | None, **headers: str
) -> tuple[int, dict[str, Any]]:
    hdrs = dict(headers)
    if token is not None:
        hdrs["Fencing-Token"] = str(token)
    resp = await client.put(f"/v1/objects/{key}", data=body, headers=hdrs)
    return resp.status, await resp.json()


async def test_201_then_200_with_key_resource_token_version_size(client: AppClient) -> None:
    first = await client.put("/v1/objects/docs/a", data=b"hello", headers={"Fencing-Token": "5"})
    second = await client.put("/v1/objects/docs/a", data=b"hello!", headers={"Fencing-Token": "5"})
    assert first.status == 201
    assert await first.json() == {"key": "docs/a", "resource": "docs/a", "token": 5, "version": 1, "size": 5}
    assert second.status == 200
    assert await second.json() == {"key": "docs/a", "resource": "docs/a", "token": 5, "version": 2, "size": 6}
    assert second.headers["Fencing-Token"] == "5"
    assert second.headers["ETag"] == f'"{hashlib.sha256(b"hello!").hexdigest()}"'


async def test_get_returns_bytes_with_writer_token_and_etag(client: AppClient) -> None:
    data = b"\x00bytes\xff"
    await put(client, "k", data, 9)
    resp = await client.get("/v1/objects/k")
    assert resp.status == 200
    assert await resp.read() == data
    assert (resp.headers["Fencing-Token"], resp.headers["Object-Version"]) == ("9", "1")
    assert resp.headers["ETag"] == f'"{hashlib.sha256(data).hexdigest()}"'


async def test_delete_answers_200_with_meta(client: AppClient) -> None:
    await put(client, "gone", b"abc", 3)
    resp = await client.delete("/v1/objects/gone", headers={"Fencing-Token": "4"})
    assert resp.status == 200
    assert await resp.json() == {"key": "gone", "resource": "gone", "token": 4, "version": 1, "size": 3}
    assert (await client.get("/v1/objects/gone")).status == 404


async def test_409_stale_token_body(client: AppClient) -> None:
    await put(client, "s", b"new", 34)
    status, body = await put(client, "s", b"old", 33)
    assert status == 409
    assert {k: body[k] for k in ("error", "resource", "token", "highest")} == {
        "error": "stale_token",
        "resource": "s",
        "token": 33,
        "highest": 34,
    }


@pytest.mark.parametrize(
    ("token", "why"),
    [("0", "zero"), ("-1", "negative"), ("+5", "sign"), ("007", "leading zero"), ("1.5", "fraction"),
     ("5 5", "space"), ("abc", "text"), (str(MAX_TOKEN + 1), "above 2^63-1"), ("9" * 40, "huge")],
)  # fmt: skip
async def test_400_malformed_token(client: AppClient, token: str, why: str) -> None:
    status, body = await put(client, "t", b"x", token)
    assert (status, body["error"]) == (400, "bad_request"), why
    assert "Fencing-Token" in body["detail"]
    assert (await client.get("/v1/fences/t")).status == 200
    assert (await (await client.get("/v1/fences/t")).json())["highest"] == 0


async def test_largest_token_is_accepted(client: AppClient) -> None:
    status, body = await put(client, "max", b"x", MAX_TOKEN)
    assert (status, body["token"]) == (201, MAX_TOKEN)


@pytest.mark.parametrize("key", ["a//b", "a/", "sp%20ace", "a b", "é", "x" * 513, "line%0Abreak", "%0A"])
async def test_400_invalid_key(client: AppClient, key: str) -> None:
    status, body = await put(client, key, b"x", 1)
    assert (status, body["error"]) == (400, "bad_request")
    listing = await (await client.get("/v1/objects")).json()
    assert listing["objects"] == []


@pytest.mark.parametrize("resource", ["line%0Abreak", "%0A", "a//b"])
async def test_400_invalid_fence_resource_even_with_a_line_break(client: AppClient, resource: str) -> None:
    resp = await client.get(f"/v1/fences/{resource}")
    assert (resp.status, (await resp.json())["error"]) == (400, "bad_request")


async def test_400_invalid_resource_header(client: AppClient) -> None:
    status, body = await put(client, "k", b"x", 1, **{"Fencing-Resource": "../etc"})
    assert (status, body["error"]) == (400, "bad_request")
    assert "Fencing-Resource" in body["detail"]


async def test_428_write_without_token(client: AppClient) -> None:
    status, body = await put(client, "k", b"x", None)
    assert (status, body["error"]) == (428, "token_required")
    resp = await client.delete("/v1/objects/k")
    assert (resp.status, (await resp.json())["error"]) == (428, "token_required")


async def test_413_body_over_the_limit(make_client: MakeClient) -> None:
    client = await make_client(max_body=10)
    status, body = await put(client, "big", b"x" * 11, 1)
    assert (status, body["error"]) == (413, "payload_too_large")
    assert (await client.get("/v1/objects/big")).status == 404
    status, _ = await put(client, "big", b"x" * 10, 1)
    assert status == 201


async def test_413_chunked_body_over_the_limit(make_client: MakeClient) -> None:
    client = await make_client(max_body=10)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"xxxx"

    resp = await client.put("/v1/objects/c", data=chunks(), headers={"Fencing-Token": "1"})
    assert (resp.status, (await resp.json())["error"]) == (413, "payload_too_large")
    assert (await (await client.get("/v1/fences/c")).json())["highest"] == 0


async def test_404_missing_object_and_unknown_route_are_json_and_say_what_exists(client: AppClient) -> None:
    resp = await client.get("/v1/objects/nothing")
    assert (resp.status, (await resp.json())["error"]) == (404, "not_found")
    resp = await client.get("/v2/else")
    body = await resp.json()
    assert (resp.status, body["error"]) == (404, "not_found")
    for route in (
        "DELETE GET HEAD PUT /v1/objects/{key}",
        "GET /v1/fences/{resource}",
        "GET /v1/openapi.json",
    ):
        assert route in body["detail"]


@pytest.mark.parametrize(
    ("method", "path", "allow", "route"),
    [("POST", "/v1/objects/k", "DELETE,GET,HEAD,PUT", "/v1/objects/{key}"),
     ("PATCH", "/v1/objects/a/b", "DELETE,GET,HEAD,PUT", "/v1/objects/{key}"),
     ("OPTIONS", "/v1/objects", "GET", "/v1/objects"),
     ("HEAD", "/v1/fences/r", "GET", "/v1/fences/{resource}"), ("DELETE", "/healthz", "GET", "/healthz")],
)  # fmt: skip
async def test_405_carries_allow_says_what_the_path_takes_and_is_counted_by_route(
    client: AppClient, method: str, path: str, allow: str, route: str
) -> None:
    resp = await client.request(method, path, data=b"x")
    assert (resp.status, resp.headers["Allow"]) == (405, allow)
    if method != "HEAD":
        body = await resp.json()
        assert body["error"] == "method_not_allowed"
        assert allow.replace(",", ", ") in body["detail"]
    text = await (await client.get("/metrics")).text()
    assert f'fencegate_requests_total{{method="{method}",route="{route}",status="405"}} 1.0' in text


async def test_head_is_get_without_the_body_and_a_fenced_head_is_a_fenced_read(client: AppClient) -> None:
    await put(client, "h", b"hello", 7)
    resp = await client.head("/v1/objects/h")
    assert (resp.status, await resp.read()) == (200, b"")
    got = await client.get("/v1/objects/h")
    for header in ("Fencing-Token", "ETag", "Object-Version", "Content-Length", "Content-Type"):
        assert resp.headers[header] == got.headers[header], header
    assert (await client.head("/v1/objects/none")).status == 404
    assert (await client.head("/v1/objects/h", headers={"Fencing-Token": "6"})).status == 409
    assert (await client.head("/v1/objects/h", headers={"Fencing-Token": "9"})).status == 200
    assert (await (await client.get("/v1/fences/h")).json())["highest"] == 9
    assert (await put(client, "h", b"late", 8))[0] == 409  # the holder of 8 is fenced out by the read


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(
        json.dumps({"keys": [{"name": "billing", "sha256": hash_secret("s3cret"), "prefixes": ["bill/"]}]})
    )
    return path


async def test_401_without_or_with_unknown_key(make_client: MakeClient, keys_file: Path) -> None:
    client = await make_client(api_keys=keys_file)
    status, body = await put(client, "bill/1", b"x", 1)
    assert (status, body["error"]) == (401, "unauthorized")
    status, body = await put(client, "bill/1", b"x", 1, Authorization="Bearer wrong")
    assert (status, body["error"]) == (401, "unauthorized")


async def test_403_key_not_scoped_to_resource_or_key(make_client: MakeClient, keys_file: Path) -> None:
    client = await make_client(api_keys=keys_file)
    auth = {"Authorization": "Bearer s3cret"}
    status, body = await put(client, "payroll/1", b"x", 1, **auth)
    assert (status, body["error"], body["name"]) == (403, "forbidden", "payroll/1")
    status, body = await put(client, "bill/1", b"x", 1, **auth, **{"Fencing-Resource": "payroll"})
    assert (status, body["error"]) == (403, "forbidden")
    status, body = await put(client, "bill/1", b"x", 1, **auth)
    assert status == 201
    listing = await client.get("/v1/objects", params={"prefix": "pay"}, headers=auth)
    assert listing.status == 403


async def test_list_pages_by_prefix(client: AppClient) -> None:
    for name in ("p/1", "p/2", "p/3", "q/1"):
        await put(client, name, b"x", 1)
    first = await (await client.get("/v1/objects", params={"prefix": "p/", "limit": "2"})).json()
    rest = await (await client.get("/v1/objects", params={"prefix": "p/", "after": first["next"]})).json()
    assert [o["key"] for o in first["objects"] + rest["objects"]] == ["p/1", "p/2", "p/3"]
    assert rest["next"] is None
    bad = await client.get("/v1/objects", params={"limit": "0"})
    assert (bad.status, (await bad.json())["error"]) == (400, "bad_request")


# Python's str.isdigit() takes any script's digits (and '²', which int() then refuses), and int() gives
# up past 4300 digits: each was read as a number or answered 500.
@pytest.mark.parametrize(
    "limit",
    ["1" * 4301, "1" + "0" * 5000, "\uff11", "\u0661", "\u0967", "\u00b2", "+5", "-5", " 5", "5 ", "5_0",
     "05", "0", "1001", ""],
    ids=lambda raw: f"{len(raw)}-chars" if len(raw) > 20 else ascii(raw),
)  # fmt: skip
async def test_a_limit_that_is_not_ascii_digits_in_range_is_400(
    client: AppClient, caplog: pytest.LogCaptureFixture, limit: str
) -> None:
    await put(client, "n/1", b"x", 1)
    with caplog.at_level("WARNING", logger="gateway.refusals"):
        resp = await client.get("/v1/objects", params={"prefix": "n/", "limit": limit})
        body = await resp.json()
    assert (resp.status, body["error"]) == (400, "bad_request"), body
    assert "1..1000" in body["detail"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # a client's mistake, not a failure
    assert (await client.get("/v1/objects", params={"prefix": "n/", "limit": "1000"})).status == 200


async def test_fence_endpoint_reports_the_mark(client: AppClient) -> None:
    await put(client, "obj", b"x", 12, **{"Fencing-Resource": "lock/a"})
    assert await (await client.get("/v1/fences/lock/a")).json() == {"resource": "lock/a", "highest": 12}
    assert await (await client.get("/v1/fences/never")).json() == {"resource": "never", "highest": 0}


async def test_health_and_readiness(client: AppClient) -> None:
    assert await (await client.get("/healthz")).json() == {"status": "ok"}
    assert await (await client.get("/readyz")).json() == {"status": "ready"}


async def test_metrics_count_requests_refusals_latency_and_marks(client: AppClient) -> None:
    await put(client, "m", b"x", 2)
    await put(client, "m", b"x", 1)
    text = await (await client.get("/metrics")).text()
    assert 'fencegate_requests_total{method="PUT",route="/v1/objects/{key}",status="409"} 1.0' in text
    assert "fencegate_stale_refusals_total 1.0" in text
    assert "fencegate_fence_check_seconds_count 2.0" in text
    assert "fencegate_marks 1.0" in text
    assert "fencegate_token_source_regressed_total 0.0" in text


async def test_metrics_count_resource_mismatches_and_idempotent_replays(
    engine_client: AppClient, unique: str
) -> None:
    """An operator tells a retry answered from its record, and a key named under another resource, apart."""
    key = f"{unique}/obj"
    headers = {"Fencing-Token": "3", "Fencing-Resource": f"{unique}/a", "Idempotency-Key": f"{unique}-1"}
    assert (await engine_client.put(f"/v1/objects/{key}", data=b"x", headers=headers)).status == 201
    assert (await engine_client.put(f"/v1/objects/{key}", data=b"x", headers=headers)).status == 201
    other = {"Fencing-Token": "4", "Fencing-Resource": f"{unique}/b"}
    assert (await engine_client.put(f"/v1/objects/{key}", data=b"y", headers=other)).status == 409
    text = await (await engine_client.get("/metrics")).text()
    assert "fencegate_idempotent_replays_total 1.0" in text
    assert "fencegate_resource_mismatches_total 1.0" in text
    assert "fencegate_stale_refusals_total 0.0" in text  # a mismatch is not a stale token


async def test_openapi_lists_exactly_the_routes(client: AppClient) -> None:
    served = await (await client.get("/v1/openapi.json")).json()
    assert served == json.loads(json.dumps(document(max_body=DEFAULT_MAX_BODY)))
    documented = {(path, method.upper()) for path, ops in served["paths"].items() for method in ops}
    routed = {
        (route.resource.canonical, route.method)
        for route in client.app.router.routes()
        if route.resource is not None
    }
    assert documented == routed


async def test_refusals_are_logged_with_resource_token_highest_client(
    client: AppClient, caplog: pytest.LogCaptureFixture
) -> None:
    await put(client, "log", b"x", 8)
    with caplog.at_level("WARNING", logger="gateway.refusals"):
        await put(client, "log", b"x", 7)
    record = json.loads(caplog.records[-1].getMessage().removeprefix("refused "))
    assert {k: record[k] for k in ("status", "error", "resource", "token", "highest", "client")} == {
        "status": 409,
        "error": "stale_token",
        "resource": "log",
        "token": 7,
        "highest": 8,
        "client": "ip:127.0.0.1",
    }


async def test_credentials_are_checked_before_the_token(make_client: MakeClient, keys_file: Path) -> None:
    client = await make_client(api_keys=keys_file)
    status, body = await put(client, "bill/1", b"x", None)
    assert (status, body["error"]) == (401, "unauthorized")
    status, body = await put(client, "bill/1", b"x", "007", Authorization="Bearer wrong")
    assert (status, body["error"]) == (401, "unauthorized")
    status, body = await put(client, "payroll/1", b"x", "x", Authorization="Bearer s3cret")
    assert (status, body["error"]) == (403, "forbidden")


@pytest.mark.parametrize(
    "header",
    [{"Content-Type": "text"}, {"If-Match": 'W/"1"'}, {"Idempotency-Key": "a b"}],
    ids=["content-type", "if-match", "idempotency-key"],
)
async def test_a_malformed_write_header_is_400_whatever_the_credentials(
    make_client: MakeClient, keys_file: Path, header: dict[str, str]
) -> None:
    client = await make_client(api_keys=keys_file)
    for credentials in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer s3cret"}):
        status, body = await put(client, "bill/1", b"x", 1, **header, **credentials)
        assert (status, body["error"]) == (400, "bad_request"), credentials
    status, body = await put(client, "bill/1", b"x", 1, Authorization="Bearer s3cret")
    assert status == 201  # the key was never refused: only the header
