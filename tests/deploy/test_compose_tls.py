"""Compose's TLS hops, checked without Docker: the settings are the ones the suite runs for real, and
the certificates `make-secrets.sh` writes pass (and fail) real handshakes the way each hop needs.

The token source and storage hops are tested against real TLS servers elsewhere
(tests/lockclient/test_tokens_tls.py, tests/storage/test_tls.py,
tests/deploy/test_native_tls.py); here compose must configure its servers with
the same settings (rendered by the cluster helper), and its clients with URLs
the product accepts, pointing at secrets the service mounts.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import pytest
import yaml
from cryptography import x509

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.cluster.servers import postgres_tls_settings, zookeeper_tls_settings
from lockclient._tls import client_context
from lockclient.postgres_tls import PARAMETERS, PostgresTLS, split_tls
from lockclient.tokens.zookeeper import url_options
from tests.urls import edit_query

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"
SECRETS = "/run/secrets/"
SECURE_PORT = "2281"
PG_KEY = (
    "/var/lib/postgresql/server.key"  # where compose's entrypoint copies the key, 0600, owned by postgres
)


def _interpolated(value: str) -> str:
    """What compose makes of `${VAR:?message}`: the password, here a stand-in."""
    return re.sub(r"\$\{[^}]*\}", "secret", value)


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())[
        "services"
    ]
    return services


def _mounted(service: dict[str, Any]) -> set[str]:
    """The paths under /run/secrets that a service's secrets appear at."""
    names = set()
    for secret in service.get("secrets", []):
        names.add(secret if isinstance(secret, str) else secret.get("target", secret["source"]))
    return {SECRETS + name for name in names}


def _query(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query))


def _postgres_tls(url: str) -> PostgresTLS:
    """The URL's TLS settings, checked by the product (the files are not read: they are the containers')."""
    return PostgresTLS(**{PARAMETERS[k]: v for k, v in _query(url).items() if k in PARAMETERS})


def _zookeeper_urls() -> dict[str, str]:
    services = _services()
    urls = {name: services[name]["environment"]["FENCEGATE_TOKENS"] for name in ("gateway-1", "gateway-2")}
    command = services["lab"]["command"]
    urls["lab"] = command[command.index("--tokens") + 1]
    return urls


def test_storage_urls_ask_for_verify_full_with_the_gateways_mounted_certificate() -> None:
    services = _services()
    for name in ("gateway-1", "gateway-2"):
        url = _interpolated(services[name]["environment"]["FENCEGATE_STORAGE"])
        tls = _postgres_tls(url)
        assert (tls.mode, tls.rootcert) == ("verify-full", SECRETS + "ca")
        files = {tls.rootcert, tls.cert, tls.key}
        assert files <= _mounted(services[name]), f"{name} does not mount {files - _mounted(services[name])}"
        assert urlsplit(url).hostname == "postgres"  # the name in PostgreSQL's certificate


def test_token_urls_ask_for_the_secure_port_with_each_services_mounted_certificate() -> None:
    services = _services()
    for name, url in _zookeeper_urls().items():
        options = url_options(urlsplit(url).query)
        assert options["use_ssl"] is True
        assert "verify_certs" not in options  # verification and the host name check stay on
        assert "check_hostname" not in options
        files = {options["ca"], options["certfile"], options["keyfile"]}
        assert files <= _mounted(services[name]), f"{name} does not mount {files - _mounted(services[name])}"
        hosts = urlsplit(url).netloc.split(",")
        assert hosts == [f"zookeeper-{i}:{SECURE_PORT}" for i in (1, 2, 3)]


def test_zookeeper_members_run_the_secure_port_the_suite_runs_and_no_plaintext_one_outside() -> None:
    services = _services()
    for n in (1, 2, 3):
        service = services[f"zookeeper-{n}"]
        env = service["environment"]
        extra = dict(entry.split("=", 1) for entry in env["ZOO_CFG_EXTRA"].split())
        expected = zookeeper_tls_settings(
            keystore=SECRETS + "zookeeper_keystore", truststore=SECRETS + "ca", mutual=True
        )
        assert extra == {"secureClientPort": SECURE_PORT, **expected}
        assert {"source": f"zookeeper_{n}_keystore", "target": "zookeeper_keystore"} in service["secrets"]
        assert "ca" in service["secrets"]
        for server in env["ZOO_SERVERS"].split():  # server.N=host:quorum:election;CLIENT_ADDRESS:PORT
            assert server.split(";")[1].startswith("127.0.0.1:"), f"a plaintext client port outside: {server}"


def test_postgres_runs_tls_only_with_the_settings_the_suite_runs() -> None:
    postgres = _services()["postgres"]
    command = postgres["command"]
    settings = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "-c")
    expected = postgres_tls_settings(
        cert=SECRETS + "postgres_cert", key=PG_KEY, ca=SECRETS + "ca", hba="/etc/postgresql/pg_hba.conf"
    )
    assert settings.items() >= expected.items()
    install = postgres["entrypoint"][2]
    assert f"install -m 0600 -o postgres -g postgres {SECRETS}postgres_key {PG_KEY}" in install
    assert {"ca", "postgres_cert", "postgres_key"} <= set(postgres["secrets"])
    assert "./postgres/pg_hba.conf:/etc/postgresql/pg_hba.conf:ro" in postgres["volumes"]
    lines = [line.split() for line in (COMPOSE / "postgres" / "pg_hba.conf").read_text().splitlines()]
    rules = [line for line in lines if line and not line[0].startswith("#")]
    assert {rule[0] for rule in rules} == {
        "local",
        "hostssl",
    }  # no `host` line: plaintext over TCP is refused
    for rule in rules:
        if rule[0] == "hostssl":
            assert rule[-2:] == ["scram-sha-256", "clientcert=verify-full"]
    assert postgres["environment"]["POSTGRES_USER"] == "fencegate"  # the name in the gateways' certificate


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """compose/make-secrets.sh run once in a copy of compose/ (it writes next to itself)."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed: run scripts/install-servers.sh")
    copy = tmp_path_factory.mktemp("compose")
    shutil.copy(COMPOSE / "make-secrets.sh", copy)
    subprocess.run(["sh", str(copy / "make-secrets.sh")], check=True, capture_output=True, timeout=60)
    return copy


def _files(compose_dir: Path) -> dict[str, Path]:
    """Each /run/secrets path a service sees, and the file make-secrets.sh wrote for it."""
    declared = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())["secrets"]
    return {SECRETS + name: compose_dir / spec["file"] for name, spec in declared.items()}


def _on_host(url: str, compose_dir: Path) -> str:
    """`url` with each mounted secret's path replaced by the file make-secrets.sh wrote for it."""
    files = {mounted: str(path) for mounted, path in _files(compose_dir).items()}
    parts = urlsplit(url)
    query = [(name, files.get(value, value)) for name, value in parse_qsl(parts.query)]
    return urlunsplit(parts._replace(query=urlencode(query, safe="/")))


def test_make_secrets_writes_every_declared_file_and_keeps_them(secrets: Path) -> None:
    files = _files(secrets)
    assert all(path.is_file() for path in files.values()), [p for p in files.values() if not p.is_file()]
    assert (secrets / "secrets").stat().st_mode & 0o777 == 0o700  # the host's other users see nothing
    assert (secrets / "secrets" / "tls" / "ca.key").stat().st_mode & 0o777 == 0o600
    assert all(path.name != "ca.key" for path in files.values())  # the CA's key is never mounted
    before = {path: path.read_bytes() for path in files.values()}
    subprocess.run(["sh", str(secrets / "make-secrets.sh")], check=True, capture_output=True, timeout=60)
    assert {path: path.read_bytes() for path in files.values()} == before


@contextlib.asynccontextmanager
async def _server(keystore: Path, key: Path | None, ca: Path) -> AsyncIterator[int]:
    """A TLS server with `keystore` (and `key`, unless the key store holds it) that requires a client
    certificate from `ca`, as PostgreSQL with clientcert=verify-full and ZooKeeper with clientAuth=need do."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(keystore, key)
    context.load_verify_locations(ca)
    context.verify_mode = ssl.CERT_REQUIRED

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def _hello(port: int, context: ssl.SSLContext, host: str) -> bytes:
    """What the server says after a handshake that checks `host` (no DNS: the name is only checked)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=host)
    try:
        return await reader.read()
    finally:
        writer.close()


async def test_gateways_reach_postgres_by_its_name_with_their_certificate(secrets: Path) -> None:
    storage = _on_host(_interpolated(_services()["gateway-1"]["environment"]["FENCEGATE_STORAGE"]), secrets)
    tls = split_tls(storage)[1]  # the product reads the files now
    context, tls_dir = tls.context(), secrets / "secrets" / "tls"
    assert context is not None
    async with _server(tls_dir / "postgres.crt", tls_dir / "postgres.key", tls_dir / "ca.pem") as port:
        assert await _hello(port, context, "postgres") == b"hello"
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            await _hello(port, context, "zookeeper-1")
        anonymous = _postgres_tls(edit_query(storage, sslcert=None, sslkey=None)).context()
        assert anonymous is not None
        try:  # TLS 1.3: the refusal is an alert on the first read, or a closed stream; never the greeting
            answer = await _hello(port, anonymous, "postgres")
        except (ssl.SSLError, ConnectionResetError) as exc:
            answer = repr(exc).encode()
        assert answer != b"hello"
    subject = x509.load_pem_x509_certificate((tls_dir / "fencegate.crt").read_bytes()).subject
    assert subject.rfc4514_string() == "CN=fencegate"  # clientcert=verify-full: the name is the role


async def test_each_zookeeper_key_store_serves_its_members_name_to_gateways_and_the_lab(
    secrets: Path,
) -> None:
    tls_dir = secrets / "secrets" / "tls"
    clients = {}
    for name, url in _zookeeper_urls().items():
        options = url_options(urlsplit(_on_host(url, secrets)).query)
        clients[name] = client_context(ca=options["ca"], cert=options["certfile"], key=options["keyfile"])
    for n in (1, 2, 3):
        async with _server(tls_dir / f"zookeeper-{n}.pem", None, tls_dir / "ca.pem") as port:
            for context in clients.values():
                assert await _hello(port, context, f"zookeeper-{n}") == b"hello"
            with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
                await _hello(port, clients["lab"], f"zookeeper-{n % 3 + 1}")


async def test_compose_pg_hba_on_a_real_postgresql_wants_tls_the_roles_certificate_and_the_password(
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
) -> None:
    """compose/postgres/pg_hba.conf as the hba_file of a real TLS PostgreSQL (Debian's, with this
    cluster's certificates): only TLS with a certificate naming the role, and its password, get in."""
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, postgres_tls="mutual"))
    admin = await asyncpg.connect(cluster.postgres_dsn)
    try:
        await admin.execute("CREATE ROLE fencegate LOGIN PASSWORD 'compose-test'")
    finally:
        await admin.close()
    node = cluster.nodes["postgres-0"]
    hba = Path(node.data_dir) / "compose_pg_hba.conf"
    shutil.copyfile(COMPOSE / "postgres" / "pg_hba.conf", hba)
    hba.chmod(0o644)
    node.argv = [f"hba_file={hba}" if arg.startswith("hba_file=") else arg for arg in node.argv]
    await asyncio.to_thread(cluster.restart, node.name)  # PostgreSQL refuses to start on a bad hba file
    gateway = cluster.authority.issue("fencegate", hosts=(), server=False, client=True)
    url = edit_query(
        f"postgresql://fencegate:compose-test@{node.address}/postgres",
        sslmode="verify-full",
        sslrootcert=node.tls["sslrootcert"],
        sslcert=str(gateway.cert),
        sslkey=str(gateway.key),
    )
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") is True
    finally:
        await conn.close()
    # (url, what the server says); a certificate for another role (CN=postgres) reads as a bad login
    refused = [
        (edit_query(url, sslcert=None, sslkey=None), "requires a valid client certificate"),
        (edit_query(url, sslcert=node.tls["sslcert"], sslkey=node.tls["sslkey"]), "authentication failed"),
        (url.replace(":compose-test@", ":wrong@"), "authentication failed"),
        (edit_query(url, sslmode="disable", sslrootcert=None, sslcert=None, sslkey=None), "no encryption"),
    ]
    for bad, message in refused:
        with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match=message):
            await asyncpg.connect(bad)
