"""API keys: `fencegate keys add/list/revoke`, hashes only, read/write scopes, reload on revoke, open mode."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from fencegate.cli import main
from gateway import Settings
from gateway.auth import ApiKey, ApiKeys, hash_secret
from gateway.errors import BadSetting, NotAuthenticated
from tests.gateway.conftest import MakeClient
from tests.waiting import eventually

RELOAD_DEADLINE = 10.0


def add_key(path: Path, name: str, *args: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["keys", "--file", str(path), "add", name, *args]) == 0
    return capsys.readouterr().out.strip()


def test_keys_add_stores_only_the_hash_and_list_shows_no_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.json"
    secret = add_key(path, "billing", "--prefix", "bill/", capsys=capsys)
    add_key(path, "reports", "--prefix", "rep/", "--prefix", "pub/", "--read-only", capsys=capsys)
    stored = path.read_text()
    assert secret not in stored
    assert hash_secret(secret) in stored
    assert path.stat().st_mode & 0o777 == 0o600
    assert main(["keys", "--file", str(path), "list"]) == 0
    listing = capsys.readouterr().out
    assert secret not in listing
    assert "billing\tread+write\t'bill/'" in listing
    assert "reports\tread\t'rep/','pub/'" in listing


def test_keys_add_twice_and_revoke_unknown_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.json"
    add_key(path, "billing", "--prefix", "bill/", capsys=capsys)
    before = path.read_text()
    assert main(["keys", "--file", str(path), "add", "billing", "--prefix", "x/"]) == 2
    assert main(["keys", "--file", str(path), "revoke", "nobody"]) == 2
    assert "no key named 'nobody'" in capsys.readouterr().err
    for blank in ("", "  ", "a\nb"):  # a name the logs and the trail could not show
        assert main(["keys", "--file", str(path), "add", blank, "--prefix", "x/"]) == 2
        assert "give a name the logs and the audit trail can show" in capsys.readouterr().err
    assert path.read_text() == before


def test_identify_compares_with_every_key_in_constant_time() -> None:
    keys = ApiKeys([ApiKey(name=f"k{i}", sha256=hash_secret(f"s{i}"), prefixes=("",)) for i in range(5)])
    assert keys.identify("Bearer s3").name == "k3"
    with pytest.raises(NotAuthenticated):
        keys.identify("Bearer s9")
    with pytest.raises(NotAuthenticated):
        ApiKeys([]).identify("Bearer anything")


@pytest.mark.parametrize("secret", ["\udcff", "ключ", "s3\udcff"])
def test_a_secret_that_is_not_ascii_is_401_not_a_server_error(secret: str) -> None:
    """aiohttp hands a header's undecodable bytes over as surrogates (`\\xff` is `\\udcff`)."""
    keys = ApiKeys([ApiKey(name="k", sha256=hash_secret("s3"), prefixes=("",))])
    with pytest.raises(NotAuthenticated):
        keys.identify(f"Bearer {secret}")


async def test_read_only_key_may_read_and_list_but_not_write_or_fence_read(
    make_client: MakeClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.json"
    writer = add_key(path, "writer", "--prefix", "doc/", capsys=capsys)
    reader = add_key(path, "reader", "--prefix", "doc/", "--read-only", capsys=capsys)
    client = await make_client(api_keys=path)
    w, r = {"Authorization": f"Bearer {writer}"}, {"Authorization": f"Bearer {reader}"}
    written = await client.put("/v1/objects/doc/a", data=b"v", headers={**w, "Fencing-Token": "3"})
    assert written.status == 201
    refused = await client.put("/v1/objects/doc/a", data=b"r", headers={**r, "Fencing-Token": "4"})
    assert (refused.status, (await refused.json())["error"]) == (403, "forbidden")
    fenced_read = await client.get("/v1/objects/doc/a", headers={**r, "Fencing-Token": "9"})
    assert fenced_read.status == 403
    deleted = await client.delete("/v1/objects/doc/a", headers={**r, "Fencing-Token": "9"})
    assert deleted.status == 403
    plain = await client.get("/v1/objects/doc/a", headers=r)
    assert (plain.status, await plain.read()) == (200, b"v")
    assert (await client.get("/v1/objects", params={"prefix": "doc/"}, headers=r)).status == 200
    fence = await client.get("/v1/fences/doc/a", headers=r)
    assert await fence.json() == {"resource": "doc/a", "highest": 3}  # no refused request moved it


async def test_a_resource_outside_the_keys_scope_is_never_named_to_it(
    make_client: MakeClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The admin binds alice's key `a/x` to `zzz/secret-payroll`; alice's scope (`a/`) does not cover it.

    She still learns that the key belongs to another resource (and what to do), and reads the bytes her
    scope covers, but no answer names that resource: not a 409, not a header, not a listing."""
    path = tmp_path / "keys.json"
    admin = {"Authorization": f"Bearer {add_key(path, 'admin', '--prefix', '', capsys=capsys)}"}
    alice = {"Authorization": f"Bearer {add_key(path, 'alice', '--prefix', 'a/', capsys=capsys)}"}
    both = ("--prefix", "a/", "--prefix", "zzz/", "--read-only")
    auditor = {"Authorization": f"Bearer {add_key(path, 'auditor', *both, capsys=capsys)}"}
    client = await make_client(api_keys=path)
    secret = "zzz/secret-payroll"
    bound = await client.put(
        "/v1/objects/a/x", data=b"v", headers={**admin, "Fencing-Token": "5", "Fencing-Resource": secret}
    )
    assert bound.status == 201
    assert (
        await client.put("/v1/objects/a/y", data=b"w", headers={**alice, "Fencing-Token": "3"})
    ).status == 201

    mine = {**alice, "Fencing-Token": "7", "Fencing-Resource": "a/mine"}
    for method in ("PUT", "GET", "DELETE"):  # a write, a fenced read, a delete
        refused = await client.request(
            method, "/v1/objects/a/x", data=b"new" if method == "PUT" else None, headers=mine
        )
        text = await refused.text()
        assert "zzz" not in text, text
        assert "payroll" not in text, text
        body = json.loads(text)
        assert (refused.status, body["error"], body["key"], body["resource"], body["object_resource"]) == (
            409, "resource_mismatch", "a/x", "a/mine", None)  # fmt: skip
        assert "belongs to another resource" in body["detail"]
        assert "ask the operator" in body["detail"]  # the fix
    for method in ("GET", "HEAD"):
        plain = await client.request(method, "/v1/objects/a/x", headers=alice)
        assert plain.status == 200
        assert "Fencing-Resource" not in plain.headers
        assert not [v for v in plain.headers.values() if "zzz" in v]
        assert await plain.read() == (b"v" if method == "GET" else b"")
    listing = await client.get("/v1/objects", params={"prefix": "a/"}, headers=alice)
    assert "zzz" not in await listing.text()
    assert [(o["key"], o["resource"]) for o in (await listing.json())["objects"]] == [
        ("a/x", None),
        ("a/y", "a/y"),
    ]
    assert await (await client.get("/v1/fences/a/mine", headers=alice)).json() == {
        "resource": "a/mine",
        "highest": 0,
    }

    # A key whose scope covers the resource sees its name, read-only or not; the admin's does too.
    for who in (auditor, admin):
        assert (await client.get("/v1/objects/a/x", headers=who)).headers["Fencing-Resource"] == secret
        listed = await (await client.get("/v1/objects", params={"prefix": "a/"}, headers=who)).json()
        assert listed["objects"][0]["resource"] == secret
    refused = await client.put(
        "/v1/objects/a/x", data=b"n", headers={**admin, "Fencing-Token": "7", "Fencing-Resource": "a/mine"}
    )
    assert (refused.status, (await refused.json())["object_resource"]) == (409, secret)
    assert await (await client.get("/v1/objects/a/x", headers=admin)).read() == b"v"  # nothing changed


async def test_revoked_key_stops_working_on_a_running_gateway(
    make_client: MakeClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.json"
    secret = add_key(path, "billing", "--prefix", "bill/", capsys=capsys)
    add_key(path, "other", "--prefix", "o/", capsys=capsys)
    client = await make_client(api_keys=path)
    auth = {"Authorization": f"Bearer {secret}", "Fencing-Token": "1"}
    assert (await client.put("/v1/objects/bill/1", data=b"x", headers=auth)).status == 201
    assert main(["keys", "--file", str(path), "revoke", "billing"]) == 0

    async def refused() -> bool:
        status = (await client.put("/v1/objects/bill/1", data=b"y", headers=auth)).status
        assert status in (200, 401)
        return status == 401

    await eventually(refused, within=RELOAD_DEADLINE, what="the revoked key refused")
    assert (await client.get("/v1/objects/bill/1")).status == 401


def test_non_loopback_without_keys_is_refused_unless_allow_open(tmp_path: Path) -> None:
    anywhere = "0.0.0.0"  # noqa: S104 - the address being refused; nothing is bound
    with pytest.raises(BadSetting, match="--allow-open"):
        Settings(host=anywhere, data_dir=tmp_path)
    assert Settings(host=anywhere, data_dir=tmp_path, allow_open=True).allow_open
    assert Settings(host=anywhere, data_dir=tmp_path, api_keys=tmp_path / "k.json").api_keys is not None
    assert main(["serve", "--host", anywhere, "--data-dir", str(tmp_path)]) == 2


async def test_open_loopback_gateway_says_so_loudly_at_start(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway"):
        await make_client()
    assert any("NO API KEYS: running OPEN on loopback" in r.getMessage() for r in caplog.records)


def test_key_file_with_a_bad_access_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    entry = {"name": "x", "sha256": hash_secret("s"), "prefixes": [""], "access": ["admin"]}
    path.write_text(json.dumps({"keys": [entry]}))
    with pytest.raises(BadSetting, match="access must be"):
        ApiKeys.load(path)
