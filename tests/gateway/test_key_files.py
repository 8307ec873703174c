"""A key file is read exactly as written, or refused; an unreadable one on reload keeps the keys.

On real gateways: a value of the wrong JSON type is refused, never read as something wider (a string
of prefixes is not split into letters); two entries with one name or one hash are refused; a name the
audit trail cannot hold is refused by `fencegate keys add` and at load; a file nested past the JSON
parser's depth, or past 16 MiB, is refused at start and, on reload, logged with the previous keys kept
(and a later revoke still reaches the gateway); a prefix no name can start with is refused with the fix.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from fencegate.cli import main
from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.errors import ServerStartError
from fencegate.lab.cluster.gateway import GatewayProcess
from gateway.auth import MAX_NAME_LENGTH, ApiKey, ApiKeys, hash_secret, write_keys
from gateway.errors import BadSetting
from storage.models import MAX_CLIENT_LENGTH
from tests.gateway.conftest import MakeClient
from tests.waiting import eventually

RELOAD_DEADLINE = 10.0
SECRET = "s3cret"
KEY_FILE_LIMIT = 16 * 1024 * 1024  # bytes, as docs/security.md states it (`gateway.auth.MAX_KEY_FILE`)


def key_file(path: Path, *entries: dict[str, object]) -> Path:
    path.write_text(json.dumps({"keys": list(entries)}))
    return path


def entry(name: str = "billing", secret: str = SECRET, **fields: object) -> dict[str, object]:
    """A key file entry; `fields` replace any of its values (`name` too), whatever their type."""
    return {"name": name, "sha256": hash_secret(secret), "prefixes": ["bill/"], **fields}


@pytest.mark.parametrize(
    "fields",
    [
        {"prefixes": [None]},
        {"prefixes": {"bill/": True}},
        {"access": {"read": True}},
        {"name": None},
        {"name": ["billing"]},
        {"sha256": int("1" * 64)},
    ],
    ids=["prefixes-null", "prefixes-object", "access-object", "name-null", "name-list", "sha256-number"],
)
def test_a_key_file_value_of_the_wrong_json_type_is_refused_not_read_as_another(
    tmp_path: Path, fields: dict[str, object]
) -> None:
    path = key_file(tmp_path / "keys.json", entry() | fields)
    with pytest.raises(BadSetting, match="cannot read API keys"):
        ApiKeys.load(path)


def test_a_prefix_written_as_a_string_is_refused_not_split_into_letters(tmp_path: Path) -> None:
    """`"prefixes": "billing/"` was read as the prefixes b, i, l, n, g and /: the key could write
    `ledger/...`, `invoices/...`, `gl/...`. `fencegate serve` now refuses the file at start."""
    path = key_file(tmp_path / "keys.json", entry(prefixes="billing/"))
    gateway = GatewayProcess(
        tmp_path / "gw.log", "--data-dir", str(tmp_path / "data"), "--api-keys", str(path)
    )
    try:
        with pytest.raises(ServerStartError, match="prefixes must be a list of strings"):
            gateway.start()
    finally:
        gateway.stop()


@pytest.mark.parametrize(
    "entries",
    [
        (entry("billing", "one"), entry("billing", "two", prefixes=[""])),
        (entry("billing", "one"), entry("admin", "one", prefixes=[""])),
    ],
    ids=["one-name", "one-hash"],
)
def test_two_keys_with_one_name_or_one_hash_are_refused(
    tmp_path: Path, entries: tuple[dict[str, object], ...]
) -> None:
    """With one hash twice, the secret had the scope of the entry listed last; with one name twice, a
    client certificate of that CN did."""
    path = key_file(tmp_path / "keys.json", *entries)
    with pytest.raises(BadSetting, match="two keys have the"):
        ApiKeys.load(path)


async def test_a_key_name_the_audit_trail_cannot_hold_is_refused_and_the_longest_one_writes(
    make_client: MakeClient,
    tmp_path: Path,
    postgres_cluster: LocalCluster,
    unique: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`key:<name>` is the client column of the audit trail and of idempotency records; one longer than
    it made every write of that key 503 on PostgreSQL (`value too long`), while `keys add` took it."""
    path = tmp_path / "keys.json"
    too_long = "n" * (MAX_NAME_LENGTH + 1)
    assert main(["keys", "--file", str(path), "add", too_long, "--prefix", ""]) == 2
    assert "give a name the logs and the audit trail can show" in capsys.readouterr().err
    assert not path.exists()
    key_file(path, entry(too_long, prefixes=[""]))
    with pytest.raises(BadSetting, match="give a name"):
        ApiKeys.load(path)

    longest = "n" * MAX_NAME_LENGTH
    assert len(f"key:{longest}") == MAX_CLIENT_LENGTH
    path.unlink()
    assert main(["keys", "--file", str(path), "add", longest, "--prefix", ""]) == 0
    auth = {"Authorization": f"Bearer {capsys.readouterr().out.strip()}"}
    client = await make_client(api_keys=path, storage=postgres_cluster.postgres_dsn)
    for token, idempotency in ((1, {}), (2, {"Idempotency-Key": unique})):
        written = await client.put(
            f"/v1/objects/{unique}", data=b"x", headers={**auth, "Fencing-Token": str(token), **idempotency}
        )
        assert written.status in (200, 201), await written.text()


@pytest.mark.parametrize("unreadable", ["nested too deeply", "past the size limit"])
async def test_an_unreadable_key_file_keeps_the_keys_and_a_later_revoke_still_works(
    make_client: MakeClient, tmp_path: Path, caplog: pytest.LogCaptureFixture, unreadable: str
) -> None:
    """JSON nested past the parser's depth raised RecursionError, which ended the reload task: the
    gateway kept the keys it had, but no later `keys revoke` ever reached it. A file of any size was
    read and parsed whole; this oversized one drops `billing`: read, it would revoke it."""
    path = key_file(tmp_path / "keys.json", entry(), entry("other", "other-secret", prefixes=["o/"]))
    client = await make_client(api_keys=path)
    auth = {"Authorization": f"Bearer {SECRET}", "Fencing-Token": "1"}
    assert (await client.put("/v1/objects/bill/1", data=b"x", headers=auth)).status == 201

    told = "nested too deeply" if unreadable == "nested too deeply" else f"more than the {KEY_FILE_LIMIT}"
    with caplog.at_level(logging.ERROR, logger="gateway"):
        if unreadable == "nested too deeply":
            path.write_text("[" * 100_000 + "]" * 100_000)
        else:
            oversized(path, entry("other", "other-secret", prefixes=["o/"]))
        await eventually(
            lambda: any(
                "API keys not reloaded" in r.getMessage() and told in r.getMessage() for r in caplog.records
            ),
            within=RELOAD_DEADLINE,
            what="the unreadable key file logged",
        )
    assert (await client.put("/v1/objects/bill/1", data=b"y", headers=auth)).status == 200  # kept

    write_keys(path, [ApiKey(name="other", sha256=hash_secret("other-secret"), prefixes=("o/",))])

    async def revoked() -> bool:
        status = (await client.get("/v1/fences/bill/1", headers={"Authorization": f"Bearer {SECRET}"})).status
        assert status in (200, 401)
        return status == 401

    await eventually(revoked, within=RELOAD_DEADLINE, what="the revoked key refused")


def oversized(path: Path, *entries: dict[str, object], size: int = KEY_FILE_LIMIT + 1) -> Path:
    """A well-formed key file of `entries`, padded with spaces to `size` bytes (one past the limit), put
    in place atomically (as `fencegate keys` writes), so a reload never reads half of it."""
    text = json.dumps({"keys": list(entries)})
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text + " " * (size - len(text)))
    temporary.replace(path)
    return path


def test_a_key_file_past_the_size_limit_is_refused_at_start_in_one_line(tmp_path: Path) -> None:
    """Parsed whole, a key file of any size was read, however large; well-formed JSON, it was served."""
    at_the_limit = oversized(tmp_path / "limit.json", entry(), size=KEY_FILE_LIMIT)
    assert len(ApiKeys.load(at_the_limit)) == 1  # the limit itself is allowed
    path = oversized(tmp_path / "keys.json", entry())
    gateway = GatewayProcess(
        tmp_path / "gw.log", "--data-dir", str(tmp_path / "data"), "--api-keys", str(path)
    )
    try:
        with pytest.raises(ServerStartError, match="exited 2"):
            gateway.start()
    finally:
        gateway.stop()
    said = (tmp_path / "gw.log").read_text().strip()
    assert said.startswith(
        f"fencegate serve: cannot read API keys from {path}: it holds {KEY_FILE_LIMIT + 1} bytes, more "
        f"than the {KEY_FILE_LIMIT} (16 MiB) a key file may hold; check that the path names the key file"
    ), said
    assert "\n" not in said  # one line: nothing was logged before it


@pytest.mark.parametrize("prefix", ["*", "bill/*", "bill/ ", "bill\\", "bill/é"])
def test_a_prefix_no_name_can_start_with_is_refused_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prefix: str
) -> None:
    """Only `''` is every name: `*` (or a space, a backslash, a letter outside ASCII) is no character a key
    or resource may hold, so such a prefix matched nothing, and `keys add` and a key file took it without
    a word while its user believed it a wildcard."""
    path = tmp_path / "keys.json"
    assert main(["keys", "--file", str(path), "add", "billing", "--prefix", "bill/", "--prefix", prefix]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "prefixes are literal (no wildcards); use '' for every resource" in err
    assert not path.exists()
    key_file(path, entry(prefixes=["bill/", prefix]))
    with pytest.raises(BadSetting, match=r"cannot read API keys .* prefixes are literal"):
        ApiKeys.load(path)


async def test_the_empty_prefix_still_covers_every_name(
    make_client: MakeClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "keys.json"
    odd = "a-z.A_Z~0:9@x=y+z,w/"  # the characters a name may hold ('%' too, left out of the URL here)
    for name, prefix in (("all", ""), ("odd", odd)):
        assert main(["keys", "--file", str(path), "add", name, "--prefix", prefix]) == 0
    every, in_odd = (line for line in capsys.readouterr().out.split())
    client = await make_client(api_keys=path)
    for secret, key in ((every, "any/where"), (in_odd, f"{odd}k")):
        headers = {"Authorization": f"Bearer {secret}", "Fencing-Token": "1"}
        written = await client.put(f"/v1/objects/{key}", data=b"x", headers=headers)
        assert written.status == 201, await written.text()
