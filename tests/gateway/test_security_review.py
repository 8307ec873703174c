"""A hostile look at the security surface, on real gateways: key files, credentials, TLS, the audit trail.

Each test is a probe an attacker or a careless operator could make and asserts the secure answer. Key
files: a value of the wrong JSON type is refused, never read as something wider (`"prefixes":
"billing/"` used to be the eight one-letter prefixes of its characters); two entries with one name or
one hash are refused (which one applied depended on their order); a name the audit trail cannot hold is
refused by `fencegate keys add` and at load (it made every write of that key 503 on PostgreSQL); a file
nested past the JSON parser's depth is logged and keeps the previous keys (it ended the reload task, so
revoked keys kept working); a file past 16 MiB is refused at start and, on reload, logged with the
previous keys kept (it was read and parsed whole, however large). Credentials: only `Bearer` with the
whole secret, and no header renames the client. TLS: `GatewayClient` refuses an expired or wrong-host
gateway certificate, a mutual-TLS gateway refuses an expired client certificate, proxy mode refuses an
upstream it cannot verify. Audit: whatever a client puts in a request, the trail still verifies, and
`audit verify` on a live database reads one snapshot (an append while it read was reported as a
truncated tail on PostgreSQL; on SQLite it held the write lock for the whole check).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import ssl
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from sqlalchemy import event

from fencegate.cli import main
from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.certs import Authority, KeyPair
from fencegate.lab.cluster.errors import ServerStartError
from fencegate.lab.cluster.gateway import GatewayProcess
from gateway.auth import MAX_NAME_LENGTH, ApiKey, ApiKeys, hash_secret, write_keys
from gateway.errors import ConfigurationError
from lockclient import GatewayClient, GatewayError
from storage import open_engine
from storage.models import MAX_CLIENT_LENGTH
from storage.verify import verify_audit
from tests.databases import fresh_database, migrated_store
from tests.gateway.conftest import AppClient, MakeClient, create_database
from tests.gateway.test_headers import send
from tests.tls_gateway import TLSGateways
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


async def fence(client: AppClient, resource: str, auth: dict[str, str]) -> int:
    answer = await client.get(f"/v1/fences/{resource}", headers=auth)
    assert answer.status == 200, await answer.text()
    highest: int = (await answer.json())["highest"]
    return highest


# --- key files -------------------------------------------------------------------------------------


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
    with pytest.raises(ConfigurationError, match="cannot read API keys"):
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
    with pytest.raises(ConfigurationError, match="two keys have the"):
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
    with pytest.raises(ConfigurationError, match="give a name"):
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
    with pytest.raises(ConfigurationError, match=r"cannot read API keys .* prefixes are literal"):
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


# --- credentials -----------------------------------------------------------------------------------


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


# --- TLS -------------------------------------------------------------------------------------------


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return Authority(tmp_path / "ca")


@pytest.mark.parametrize(
    ("kind", "reason"),
    [("expired", "certificate has expired"), ("wrong-host", "not valid for the name connected to")],
)
async def test_gateway_client_refuses_an_expired_or_wrong_host_gateway_certificate(
    tls_gateways: TLSGateways, ca: Authority, kind: str, reason: str
) -> None:
    server = (
        ca.issue("gateway", expired=True)
        if kind == "expired"
        else ca.issue("gateway", hosts=("elsewhere.test",))
    )
    url = tls_gateways.start(server)
    async with GatewayClient(url, ssl_ca_certs=ca.cert, retry=None) as gateway:
        with pytest.raises(GatewayError, match=reason) as refused:
            await gateway.put("docs/a", b"to a stranger", token=1)
    assert (refused.value.status, refused.value.code) == (None, "tls")
    trusting = ssl.create_default_context(cafile=str(ca.cert))
    trusting.check_hostname, trusting.verify_mode = False, ssl.CERT_NONE  # to look, not to write
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{url}/v1/fences/docs/a", ssl=trusting) as answer,
    ):
        assert (await answer.json())["highest"] == 0  # the refused client sent nothing


async def test_mutual_tls_refuses_an_expired_client_certificate_of_its_own_ca(
    tls_gateways: TLSGateways, ca: Authority
) -> None:
    url = tls_gateways.start(ca.issue("gateway"), "--tls-client-ca", str(ca.cert))
    valid = ca.issue("billing", hosts=(), server=False, client=True)
    expired = ca.issue("old-billing", hosts=(), server=False, client=True, expired=True)
    async with GatewayClient(
        url, ssl_ca_certs=ca.cert, ssl_certfile=expired.cert, ssl_keyfile=expired.key, retry=None
    ) as gateway:
        with pytest.raises(GatewayError) as refused:
            await gateway.put("payroll/1", b"x", token=1)
    assert refused.value.status is None  # no answer: the handshake (or, on TLS 1.3, the first read) failed
    async with GatewayClient(
        url, ssl_ca_certs=ca.cert, ssl_certfile=valid.cert, ssl_keyfile=valid.key, retry=None
    ) as gateway:
        assert (await gateway.fence("payroll/1")) == 0  # nothing was written
    assert '"client": "cert:old-billing"' not in tls_gateways.started[0].log_path.read_text()


def client_certificates(directory: Path, names: Sequence[str]) -> tuple[Path, list[KeyPair]]:
    """A client CA of the test's own, and a client certificate for each subject CN in `names`, unchecked:
    `cryptography` (and so `Authority.issue`) refuses a CN over X.509's 64 characters, but a CA is free
    to sign one, and OpenSSL verifies it as any other (a NUL in it too)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def signed(subject: x509.Name, key: ec.EllipticCurvePrivateKey, *, ca: bool) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False)
        return builder.sign(ca_key, hashes.SHA256())

    def pem(path: Path, data: bytes) -> Path:
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    directory.mkdir()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "clients CA")])
    ca_cert = pem(
        directory / "ca.pem", signed(ca_name, ca_key, ca=True).public_bytes(serialization.Encoding.PEM)
    )
    pairs = []
    for i, name in enumerate(names):
        key = ec.generate_private_key(ec.SECP256R1())
        with warnings.catch_warnings():  # the length warning: that CN is what is being tested
            warnings.simplefilter("ignore", UserWarning)
            subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name, _validate=False)])
        cert = signed(subject, key, ca=False).public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        pairs.append(
            KeyPair(cert=pem(directory / f"{i}.crt", cert), key=pem(directory / f"{i}.key", key_pem))
        )
    return ca_cert, pairs


async def test_a_client_certificate_name_the_trail_cannot_hold_is_401_and_the_longest_writes(
    tls_gateways: TLSGateways, ca: Authority, tmp_path: Path, postgres_cluster: LocalCluster
) -> None:
    """Without a key file a mutual-TLS client is `cert:<CN>` in the audit trail and idempotency records
    (128 characters). X.509 bounds a CN at 64, which fits, but a CA may sign a longer one: a CN of 124
    characters or more made every write of its client 503 on PostgreSQL (`value too long`), and so did a
    NUL (no PostgreSQL text holds one), while SQLite took them. Now such a client is 401 with the fix,
    nothing is written, and the log has the reason; the longest CN that fits writes."""
    longest = MAX_CLIENT_LENGTH - len("cert:")
    fits = ["c" * 64, "c" * longest]
    refused = ["c" * (longest + 1), "c" * 1000, "nul\x00cn", "bell\x07cn", "two\nlines", " "]
    client_ca, pairs = client_certificates(tmp_path / "clients", [*fits, *refused])
    dsn = await create_database(postgres_cluster.postgres_dsn)
    url = tls_gateways.start(ca.issue("gateway"), "--tls-client-ca", str(client_ca), "--storage", dsn)

    def context(pair: KeyPair) -> ssl.SSLContext:
        trusting = ssl.create_default_context(cafile=str(ca.cert))
        trusting.load_cert_chain(pair.cert, pair.key)
        return trusting

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        for i, (name, pair) in enumerate(zip([*fits, *refused], pairs, strict=True)):
            for token, extra in ((1, {}), (2, {"Idempotency-Key": f"retry-{i}"})):
                headers = {"Fencing-Token": str(token), **extra}
                async with http.put(
                    f"{url}/v1/objects/r{i}", data=b"x", headers=headers, ssl=context(pair)
                ) as resp:
                    body = await resp.json()
                    if name in fits:
                        assert resp.status in (200, 201), (len(name), body)
                    else:
                        assert (resp.status, body["error"]) == (401, "unauthorized"), (name[:20], body)
                        assert f"CN is 1..{longest} printable characters" in body["detail"], body
            async with http.get(f"{url}/healthz", ssl=context(pair)) as probe:
                assert probe.status == 200  # a probe is answered whoever asks
        for i, name in enumerate([*fits, *refused]):
            async with http.get(f"{url}/v1/fences/r{i}", ssl=context(pairs[0])) as resp:
                assert (await resp.json())["highest"] == (2 if name in fits else 0), name[
                    :20
                ]  # nothing written
    log = tls_gateways.started[0].log_path.read_text()
    assert log.count("cannot name a client in the audit trail") == 2 * len(refused)


@pytest.fixture
async def tls_upstream(aiohttp_server: Any, tmp_path: Path) -> tuple[list[str], TestServer]:
    """An HTTPS upstream whose certificate no system store trusts; it records what reached it."""
    reached: list[str] = []

    async def record(request: web.Request) -> web.Response:
        reached.append(f"{request.method} {request.path}")
        return web.Response(status=201)

    app = web.Application()
    app.router.add_route("*", "/store/{key:.*}", record)
    server_cert = Authority(tmp_path / "upstream-ca").issue("upstream")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server_cert.cert, server_cert.key)
    server: TestServer = await aiohttp_server(app, ssl=context)
    return reached, server


async def test_proxy_mode_refuses_an_upstream_whose_certificate_it_cannot_verify(
    make_client: MakeClient, tls_upstream: tuple[list[str], TestServer]
) -> None:
    reached, server = tls_upstream
    upstream = str(server.make_url("/store"))
    assert upstream.startswith("https://")
    proxy = await make_client(upstream_ordering="trust-path", upstream=upstream, upstream_timeout=5.0)
    for method in ("PUT", "GET", "DELETE"):
        answer = await proxy.request(method, "/v1/objects/doc", data=b"x", headers={"Fencing-Token": "1"})
        text = await answer.text()
        assert (answer.status, json.loads(text)["error"]) == (503, "upstream_unavailable"), text
        assert str(server.port) not in text  # no address in the body
        assert "certificate" not in text.lower()  # nor the driver's words
    assert reached == []  # not one request was sent over the unverified connection


# --- the audit trail -------------------------------------------------------------------------------


async def test_what_a_client_puts_in_a_request_cannot_break_the_trail(
    make_client: MakeClient,
    tmp_path: Path,
    postgres_cluster: LocalCluster,
    unique: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Quotes, JSON, brackets and non-ASCII in a key's name, and refused requests carrying oversized,
    non-ASCII or control-laden names and tokens, on PostgreSQL (whose columns have lengths): every
    refusal is a 4xx, every one reaches the trail, and `fencegate audit verify` finds it sound."""
    dsn = await create_database(postgres_cluster.postgres_dsn)
    name = 'q"],[1,"x\\ ключ {"a": 1}'
    path = tmp_path / "keys.json"
    assert main(["keys", "--file", str(path), "add", name, "--prefix", ""]) == 0
    auth = [("Authorization", f"Bearer {capsys.readouterr().out.strip()}")]
    client = await make_client(api_keys=path, storage=dsn, group_commit=0)
    assert (await send(client, "PUT", f"/v1/objects/{unique}", [*auth, ("Fencing-Token", "5")], b"v"))[
        0
    ] == 201

    hostile: list[tuple[str, str, list[tuple[str, str]]]] = [
        ("PUT", f"/v1/objects/{unique}", [*auth, ("Fencing-Token", "4")]),  # stale
        ("PUT", f"/v1/objects/{unique}", [*auth, ("Fencing-Token", "9" * 4000)]),
        ("PUT", f"/v1/objects/{unique}", [*auth, ("Fencing-Token", "5"), ("Fencing-Resource", "r" * 7000)]),
        ("PUT", f"/v1/objects/{unique}", [*auth, ("Fencing-Token", "5"), ("Fencing-Resource", 'a"],"b')]),
        ("PUT", "/v1/objects/" + "k" * 3000, [*auth, ("Fencing-Token", "5")]),
        ("PUT", "/v1/objects/%E2%80%A8%0A%00x", [*auth, ("Fencing-Token", "5")]),
        ("GET", "/v1/fences/" + "%22%5D%2C%5B" * 50, auth),
        ("PUT", f"/v1/objects/{unique}", [("Authorization", 'Bearer \\"],[0'), ("Fencing-Token", "5")]),
    ]
    for method, target, headers in hostile:
        status, body = await send(client, method, target, headers, b"x")
        assert 400 <= status < 500, (target[:60], status, body)

    verify = ["audit", "verify", "--storage", dsn, "--json"]

    async def every_refusal_in_a_sound_trail() -> bool:
        assert await asyncio.to_thread(main, verify) == 0  # its own event loop, off this one
        report = json.loads(capsys.readouterr().out)
        assert report["ok"], report["violations"]
        return int(report["entries"]) - int(report["outcomes"].get("accepted", 0)) == len(hostile)

    await eventually(every_refusal_in_a_sound_trail, within=RELOAD_DEADLINE, what="every refusal verified")


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_verify_reads_one_snapshot_while_a_gateway_appends(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """An operator runs `audit verify` on a live database. A write committed after verify read the
    entries and before it read the head row made PostgreSQL's verify report "entries were removed
    from the tail" (a false alarm of tampering); on SQLite verify held the write lock (BEGIN
    IMMEDIATE) for its whole read, so the gateway's writes waited on it, up to the busy timeout."""
    async with contextlib.AsyncExitStack() as stack:
        if engine == "postgresql":
            cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
            url = await stack.enter_async_context(fresh_database(cluster, "snapshot"))
        else:
            url = f"sqlite:///{tmp_path / 'fencegate.db'}"
        store = await stack.enter_async_context(migrated_store(url))
        await store.put("k", b"1", resource="r", token=1)
        verifying = open_engine(url)
        stack.push_async_callback(verifying.dispose)
        written: list[str] = []

        def append_from_another_process() -> None:  # its own loop, engine and connection
            async def put() -> None:
                async with migrated_store(url) as other:
                    await other.put("k", b"2", resource="r", token=2)

            try:
                asyncio.run(put())
                written.append("committed")
            except Exception as exc:  # noqa: BLE001 - the failure is what the test reports
                written.append(f"{type(exc).__name__}: {exc}")

        def between_the_entries_and_the_head_row(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if "fencegate_audit_head" in statement and not written:
                writer = threading.Thread(target=append_from_another_process)
                writer.start()
                writer.join()

        event.listen(verifying.sync_engine, "before_cursor_execute", between_the_entries_and_the_head_row)
        report = await verify_audit(verifying)
    assert written == ["committed"]  # not blocked by the verify
    assert report.ok, report.violations
    assert (report.rows, report.stored_head, report.chain.last_id) == (1, report.chain, 1)  # as of its start
