"""Compose's TLS hops, checked without Docker: the settings are the ones the suite runs for real, and
the certificates `make-secrets.sh` writes pass (and fail) real handshakes the way each hop needs.

The token source and storage hops are tested against real TLS servers elsewhere
(tests/lockclient/test_tokens_tls.py, tests/storage/test_tls.py,
tests/deploy/test_native_tls.py); here compose must configure its servers with
the same settings (rendered by the cluster helper), and its clients with URLs
the product accepts, pointing at secrets the service mounts.

The Redis and gateway hops run here as compose runs them, on loopback: its
masters' arguments on real redis-server, its gateways' environment on real
`fencegate serve`, compose/haproxy.cfg on real HAProxy, its health checks,
the lab's command and docs/deploy.md's curl lines, each with the files
`make-secrets.sh` wrote in place of the mounted secrets, and a service's
name (no DNS here) replaced by `localhost`, which its certificate names too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import pytest
import yaml
from cryptography import x509

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.cluster.certs import KeyPair
from fencegate.lab.cluster.gateway import GatewayProcess
from fencegate.lab.cluster.servers import (
    Node,
    RedisTLS,
    free_port,
    postgres_tls_settings,
    redis_node,
    zookeeper_tls_settings,
)
from fencegate.lab.cluster.topology import haproxy_binary
from lockclient import GatewayClient, GatewayError, LockNotAcquired, Redlock
from lockclient.postgres_tls import PARAMETERS, PostgresTLS, split_tls
from lockclient.tls import client_context
from lockclient.tokens.zookeeper import url_options
from tests.tls_greeting import GREETING, greeting_server, handshake, hello
from tests.urls import edit_query, with_host
from tests.waiting import eventually, eventually_sync

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


async def test_gateways_reach_postgres_by_its_name_with_their_certificate(secrets: Path) -> None:
    storage = _on_host(_interpolated(_services()["gateway-1"]["environment"]["FENCEGATE_STORAGE"]), secrets)
    tls = split_tls(storage)[1]  # the product reads the files now
    context, tls_dir = tls.context(), secrets / "secrets" / "tls"
    assert context is not None
    async with greeting_server(
        tls_dir / "postgres.crt", tls_dir / "postgres.key", client_ca=tls_dir / "ca.pem"
    ) as port:
        assert await hello(port, context, "postgres") == GREETING
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            await hello(port, context, "zookeeper-1")
        anonymous = _postgres_tls(edit_query(storage, sslcert=None, sslkey=None)).context()
        assert anonymous is not None
        try:  # TLS 1.3: the refusal is an alert on the first read, or a closed stream; never the greeting
            answer = await hello(port, anonymous, "postgres")
        except (ssl.SSLError, ConnectionResetError) as exc:
            answer = repr(exc).encode()
        assert answer != GREETING
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
        async with greeting_server(
            tls_dir / f"zookeeper-{n}.pem", None, client_ca=tls_dir / "ca.pem"
        ) as port:
            for context in clients.values():
                assert await hello(port, context, f"zookeeper-{n}") == GREETING
            with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
                await hello(port, clients["lab"], f"zookeeper-{n % 3 + 1}")


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


# -- Redis: the masters run with compose's arguments, the lab connects with compose's URLs -----------------

REDIS_PORT = "6379"
MASTERS = range(1, 6)


def _tls_arguments(argv: list[str]) -> list[str]:
    """The listening and TLS part of a redis-server command line: `--port 0` to `--tls-auth-clients X`."""
    start, end = argv.index("--port"), argv.index("--tls-auth-clients") + 2
    return argv[start:end]


def _lab_redis_urls() -> list[str]:
    command: list[str] = _services()["lab"]["command"]
    start = command.index("--redis") + 1
    return command[start : start + len(MASTERS)]


def _mapped(
    argv: list[str], compose_dir: Path, service: str, ports: dict[str, str] | None = None
) -> list[str]:
    """`argv` with each path under /run/secrets replaced by the file `service` sees there (a secret's
    target names the path, its source the file), and the ports that `ports` maps."""
    declared = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())["secrets"]
    files = {}
    for secret in _services()[service].get("secrets", []):
        source, target = (secret, secret) if isinstance(secret, str) else (secret["source"], secret["target"])
        files[SECRETS + target] = str(compose_dir / declared[source]["file"])
    return [(ports or {}).get(arg, files.get(arg, arg)) for arg in argv]


def test_redis_masters_run_tls_only_with_the_arguments_the_suite_runs(tmp_path: Path) -> None:
    """The arguments the cluster helper gives a TLS master that requires a client certificate."""
    services = _services()
    mounted = KeyPair(cert=Path(SECRETS + "redis_cert"), key=Path(SECRETS + "redis_key"))
    suite = redis_node(
        "redis-compose", tmp_path, tls=RedisTLS(ca=Path(SECRETS + "ca"), server=mounted, client=mounted)
    )
    expected = [REDIS_PORT if arg == str(suite.port) else arg for arg in _tls_arguments(suite.argv)]
    for n in MASTERS:
        service = services[f"redis-{n}"]
        assert _tls_arguments(service["command"]) == expected
        assert expected[:2] == ["--port", "0"]  # no plaintext port at all
        assert {"source": f"redis_{n}_cert", "target": "redis_cert"} in service["secrets"]
        assert {"source": f"redis_{n}_key", "target": "redis_key"} in service["secrets"]
        assert "ca" in service["secrets"]


def test_the_lab_reaches_each_master_by_its_name_with_its_mounted_certificate() -> None:
    lab = _services()["lab"]
    for n, url in zip(MASTERS, _lab_redis_urls(), strict=True):
        parts = urlsplit(url)
        assert (parts.scheme, parts.hostname, str(parts.port)) == ("rediss", f"redis-{n}", REDIS_PORT)
        query = _query(url)
        assert set(query) == {"ssl_ca_certs", "ssl_certfile", "ssl_keyfile"}  # verification and names stay on
        assert set(query.values()) <= _mounted(lab)
        assert query["ssl_ca_certs"] == SECRETS + "ca"


@pytest.fixture(scope="module")
def masters(secrets: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Five redis-server masters with compose's TLS arguments and make-secrets.sh's certificates."""
    tls_dir = secrets / "secrets" / "tls"
    cluster = LocalCluster(tmp_path_factory.mktemp("compose-redis"))
    try:
        for n in MASTERS:
            server = KeyPair(cert=tls_dir / f"redis-{n}.crt", key=tls_dir / f"redis-{n}.key")
            lab = KeyPair(cert=tls_dir / "lab.crt", key=tls_dir / "lab.key")
            cluster.add_redis(tls=RedisTLS(ca=tls_dir / "ca.pem", server=server, client=lab))
        yield cluster
    finally:
        cluster.stop_all()


def _master(cluster: LocalCluster, n: int) -> Node:
    return cluster.nodes[f"redis-{n - 1}"]


def _lab_urls_for(cluster: LocalCluster, compose_dir: Path) -> list[str]:
    """The lab's URLs with the files on this host and each master's port, reached as `localhost`
    (the other name in a master's certificate: there is no DNS name redis-N here)."""
    urls = []
    for n, url in zip(MASTERS, _lab_redis_urls(), strict=True):
        urls.append(with_host(_on_host(url, compose_dir), "localhost").replace(
            f"localhost:{REDIS_PORT}", f"localhost:{_master(cluster, n).port}"
        ))  # fmt: skip
    return urls


def test_the_masters_run_exactly_compose_arguments(masters: LocalCluster, secrets: Path) -> None:
    for n in MASTERS:
        node, name = _master(masters, n), f"redis-{n}"
        compose = _tls_arguments(_services()[name]["command"])
        assert _tls_arguments(node.argv) == _mapped(compose, secrets, name, {REDIS_PORT: str(node.port)})


async def test_the_lab_takes_and_releases_a_lease_on_masters_run_as_compose_runs_them(
    masters: LocalCluster, secrets: Path
) -> None:
    urls = _lab_urls_for(masters, secrets)
    resource = f"compose-tls-{uuid.uuid4().hex[:8]}"
    async with Redlock(urls, node_timeout=2.0, ttl=30.0) as locker:
        lease = await locker.acquire(resource, blocking=False)
        await eventually(lambda: set(lease.nodes.values()) == {"ok"}, what="every master's grant")
        await locker.release(lease)
        again = await locker.acquire(resource, blocking=False)  # released on every master: free at once
        await locker.release(again)


async def test_a_master_refuses_the_lab_without_its_certificate_and_the_name_is_checked(
    masters: LocalCluster, secrets: Path
) -> None:
    url = edit_query(_lab_urls_for(masters, secrets)[0], ssl_certfile=None, ssl_keyfile=None)
    async with Redlock([url], node_timeout=5.0, ttl=30.0) as locker:
        with pytest.raises(LockNotAcquired) as caught:
            await locker.acquire(f"compose-tls-{uuid.uuid4().hex[:8]}", blocking=False)
    assert "the master requires a client certificate" in caught.value.reasons[url]
    tls_dir = secrets / "secrets" / "tls"
    lab = client_context(
        ca=str(tls_dir / "ca.pem"), cert=str(tls_dir / "lab.crt"), key=str(tls_dir / "lab.key")
    )
    port = _master(masters, 1).port
    await handshake(port, lab, "redis-1")
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        await handshake(port, lab, "redis-2")


def test_the_redis_health_check_pings_over_tls_with_the_masters_own_certificate(
    masters: LocalCluster, secrets: Path
) -> None:
    for n in MASTERS:
        name = f"redis-{n}"
        argv = _services()[name]["healthcheck"]["test"][1:]
        argv = _mapped(argv, secrets, name, {REDIS_PORT: str(_master(masters, n).port)})
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        assert (result.returncode, result.stdout.strip()) == (0, "PONG"), result.stderr


# -- The gateways: HTTPS as compose serves it, HAProxy passing TLS through, the lab's check over it ----------

HTTPS_PORT = "8443"


def _gateway_env(compose_dir: Path, data_dir: Path, **changes: str) -> dict[str, str]:
    """gateway-1's FENCEGATE_* settings with the files on this host, on loopback, over SQLite storage
    and without a token source (those hops run for real above and in tests/storage, tests/lockclient)."""
    compose = _services()["gateway-1"]["environment"]
    env = dict(
        zip(compose, _mapped([str(v) for v in compose.values()], compose_dir, "gateway-1"), strict=True)
    )
    del env["FENCEGATE_TOKENS"]
    data_dir.mkdir(parents=True, exist_ok=True)
    env |= {
        "FENCEGATE_STORAGE": f"sqlite:///{data_dir.parent / 'fencegate.db'}",
        "FENCEGATE_HOST": "127.0.0.1",
        "FENCEGATE_DATA_DIR": str(data_dir),
    }
    return env | changes


@contextlib.contextmanager
def _gateway(compose_dir: Path, data_dir: Path, **changes: str) -> Iterator[int]:
    """One `fencegate serve` with compose's settings; its port."""
    process = GatewayProcess(data_dir.with_suffix(".log"), env=_gateway_env(compose_dir, data_dir, **changes))
    url = process.start()
    try:
        assert url.startswith("https://"), url
        port = urlsplit(url).port
        assert port is not None
        yield port
    finally:
        process.stop()


def test_gateways_serve_https_and_the_load_balancer_passes_tls_through() -> None:
    services = _services()
    for name in ("gateway-1", "gateway-2"):
        env = services[name]["environment"]
        assert (env["FENCEGATE_TLS_CERT"], env["FENCEGATE_TLS_KEY"]) == (
            SECRETS + "gateway_https_cert",
            SECRETS + "gateway_https_key",
        )
        assert {env["FENCEGATE_TLS_CERT"], env["FENCEGATE_TLS_KEY"]} <= _mounted(services[name])
        assert env["FENCEGATE_PORT"] == HTTPS_PORT
        assert env["FENCEGATE_TLS_CLIENT_CA"] == SECRETS + "ca"  # mutual TLS
    lab = services["lab"]
    command = lab["command"]
    assert command[command.index("--gateway") + 1] == f"https://lb:{HTTPS_PORT}"
    gateway_tls = [
        command[command.index(flag) + 1] for flag in ("--gateway-ca", "--gateway-cert", "--gateway-key")
    ]
    assert gateway_tls == [SECRETS + "ca", SECRETS + "lab_cert", SECRETS + "lab_key"]
    assert set(gateway_tls) <= _mounted(lab)
    assert f"{HTTPS_PORT}:{HTTPS_PORT}" in services["lb"]["ports"]
    assert {SECRETS + "ca", SECRETS + "lb_check"} <= _mounted(services["lb"])


@contextlib.contextmanager
def _haproxy(compose_dir: Path, run_dir: Path, gateways: dict[str, int]) -> Iterator[tuple[int, int]]:
    """HAProxy with compose/haproxy.cfg (files, addresses and ports of this host; no Docker DNS) in front
    of `gateways` (name: port); its (TLS port, stats port) once it routes to every gateway."""
    port, stats = free_port(), free_port()
    text = (COMPOSE / "haproxy.cfg").read_text()
    text = re.sub(r"resolvers docker\n(    .*\n)+\n", "", text).replace(
        " resolvers docker init-addr last,libc,none", ""
    )
    for name, gateway_port in gateways.items():
        text = text.replace(f" {name}:{HTTPS_PORT} ", f" 127.0.0.1:{gateway_port} ")
    text = text.replace(f"bind *:{HTTPS_PORT}", f"bind 127.0.0.1:{port}").replace(
        "bind *:8404", f"bind 127.0.0.1:{stats}"
    )
    for mounted, path in _files(compose_dir).items():
        text = text.replace(mounted + " ", f"{path} ").replace(mounted + "\n", f"{path}\n")
    assert "/run/secrets" not in text, text
    assert "*:" not in text, text
    config = run_dir / "haproxy.cfg"
    config.write_text(text)
    with (run_dir / "haproxy.log").open("ab") as log:
        proc = subprocess.Popen([haproxy_binary(), "-db", "-f", str(config)], stdout=log, stderr=log)
    try:
        yield port, stats
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def _up(stats: int) -> bool:
    """Whether HAProxy's own /lb-health says a gateway passes its checks (compose's lb health check)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{stats}/lb-health", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _checks_passed(stats: int, names: set[str]) -> bool:
    """Whether each of `names` is UP in HAProxy's stats (its checks of /readyz over TLS passed)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{stats}/stats;csv", timeout=2) as answer:
            rows = answer.read().decode().splitlines()
    except OSError:
        return False
    up = {row.split(",")[1] for row in rows if row.startswith("gateways,") and ",UP," in row}
    return names <= up


@pytest.fixture(scope="module")
def deployment(secrets: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """Two gateways as compose runs them, and HAProxy with compose's config in front: (TLS port, stats)."""
    run_dir = tmp_path_factory.mktemp("compose-gateways")
    with (
        _gateway(secrets, run_dir / "gateway-1") as one,
        _gateway(secrets, run_dir / "gateway-2") as two,
        _haproxy(secrets, run_dir, {"gateway-1": one, "gateway-2": two}) as ports,
    ):
        eventually_sync(lambda: _checks_passed(ports[1], {"gateway-1", "gateway-2"}), within=30.0,
                        what="HAProxy's TLS checks of both gateways passing")  # fmt: skip
        yield ports


def _lab_check(
    secrets: Path, masters: LocalCluster, lb_port: int, tmp_path: Path, flags: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """compose's `lab` command with this host's files and ports (tokens from SQLite: the ZooKeeper hop is
    checked above), each of `flags` given another value or, when empty, left out."""
    flags = flags or {}
    command = _mapped(_services()["lab"]["command"], secrets, "lab")
    start = command.index("--redis") + 1
    command[start : start + len(MASTERS)] = _lab_urls_for(masters, secrets)
    command[command.index("--gateway") + 1] = f"https://localhost:{lb_port}"
    command[command.index("--tokens") + 1] = f"sqlite:///{tmp_path / 'tokens.db'}"
    command[command.index("--seconds") + 1] = "2"
    command[command.index("--workers") + 1] = "4"
    for flag, value in flags.items():
        command[command.index(flag) : command.index(flag) + 2] = [flag, value] if value else []
    environment = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    return subprocess.run(
        [sys.executable, "-m", "fencegate.cli", "--log-level", "WARNING", *command[1:]],
        capture_output=True, text=True, timeout=120, check=False, env=environment,
    )  # fmt: skip


def test_the_lab_check_through_haproxy_over_https_is_clean(
    deployment: tuple[int, int], masters: LocalCluster, secrets: Path, tmp_path: Path
) -> None:
    result = _lab_check(secrets, masters, deployment[0], tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["problems"] == []
    assert report["acknowledged"] > 0


def test_the_lab_without_the_deployments_ca_does_not_trust_the_gateways(
    deployment: tuple[int, int], masters: LocalCluster, secrets: Path, tmp_path: Path
) -> None:
    """--gateway-ca is what makes the lab trust the gateways: without it, no write is acknowledged."""
    result = _lab_check(secrets, masters, deployment[0], tmp_path, {"--gateway-ca": ""})
    assert result.returncode == 1
    assert json.loads(result.stdout)["acknowledged"] == 0


def test_the_gateways_refuse_the_lab_without_its_client_certificate(
    deployment: tuple[int, int], masters: LocalCluster, secrets: Path, tmp_path: Path
) -> None:
    """Mutual TLS through HAProxy's passthrough: the API key alone does not get a write in."""
    result = _lab_check(
        secrets, masters, deployment[0], tmp_path, {"--gateway-cert": "", "--gateway-key": ""}
    )
    assert result.returncode == 1
    assert json.loads(result.stdout)["acknowledged"] == 0


async def test_through_the_load_balancer_a_client_meets_the_gateways_own_certificate_for_lb(
    deployment: tuple[int, int], secrets: Path
) -> None:
    """TCP passthrough: the TLS session is the gateway's, for the name clients use (`lb`)."""
    tls_dir = secrets / "secrets" / "tls"
    tls = await handshake(deployment[0], client_context(ca=str(tls_dir / "ca.pem")), "lb")
    certificate = tls.getpeercert()
    assert certificate is not None
    assert certificate["subject"] == ((("commonName", "gateway"),),)
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        await handshake(deployment[0], client_context(ca=str(tls_dir / "ca.pem")), "postgres")


def _gateway_health_check(secrets: Path, port: int) -> subprocess.CompletedProcess[str]:
    """compose's health check of a gateway, run here against `port`."""
    _cmd, _python, flag, code = _services()["gateway-1"]["healthcheck"]["test"]
    for mounted, path in _files(secrets).items():
        code = code.replace(f"'{mounted}'", f"'{path}'")
    code = code.replace(f"localhost:{HTTPS_PORT}/", f"localhost:{port}/")
    assert "/run/secrets" not in code
    return subprocess.run(
        [sys.executable, flag, code], capture_output=True, text=True, timeout=30, check=False
    )


def test_the_gateway_health_check_is_https_checked_against_the_ca(
    deployment: tuple[int, int], secrets: Path, tmp_path: Path
) -> None:
    with _gateway(secrets, tmp_path / "gateway") as port:
        result = _gateway_health_check(secrets, port)
        assert result.returncode == 0, result.stderr


async def test_with_mutual_tls_on_compose_clients_get_in_and_a_client_without_a_certificate_does_not(
    secrets: Path, tmp_path: Path
) -> None:
    """FENCEGATE_TLS_CLIENT_CA=/run/secrets/ca, as compose runs the gateways: the lab's and HAProxy's
    certificates are accepted, the health check passes, a client without one is refused."""
    tls_dir = secrets / "secrets" / "tls"
    ca = str(tls_dir / "ca.pem")
    with _gateway(secrets, tmp_path / "gateway") as port:
        assert (await asyncio.to_thread(_gateway_health_check, secrets, port)).returncode == 0
        api_key = (secrets / "secrets" / "lab-api-key").read_text().strip()
        url = f"https://localhost:{port}"
        async with GatewayClient(
            url,
            api_key=api_key,
            ssl_ca_certs=ca,
            ssl_certfile=tls_dir / "lab.crt",
            ssl_keyfile=tls_dir / "lab.key",
        ) as client:
            assert isinstance(await client.list("loadcheck/"), list)
        with_certificate, without = _deploy_curls()
        assert (await asyncio.to_thread(_curl, with_certificate, secrets, port)).returncode == 0
        assert (await asyncio.to_thread(_curl, without, secrets, port)).returncode != 0
        check = client_context(ca=ca, cert=str(tls_dir / "lb.pem"))
        assert (await handshake(port, check, "gateway-1")).getpeercert()
        async with GatewayClient(url, api_key=api_key, ssl_ca_certs=ca) as anonymous:
            with pytest.raises(GatewayError) as refused:
                await anonymous.list("loadcheck/")
        # no answer at all: TLS 1.3 reports the refused certificate as an alert or a closed stream
        assert refused.value.status is None, refused.value
        # refused in the handshake (TLS 1.2), or by a close right after it (TLS 1.3)
        assert refused.value.code in {"tls", "unreachable", "disconnected"}, refused.value


def _deploy_curls() -> list[str]:
    """docs/deploy.md's curl lines, in order: with the lab's certificate, then without one (refused)."""
    lines = (ROOT / "docs" / "deploy.md").read_text().splitlines()
    return [line for line in lines if line.startswith("curl ")]


def _curl(line: str, compose_dir: Path, port: int) -> subprocess.CompletedProcess[str]:
    """A docs curl line as written, run from a directory where `compose/` is make-secrets.sh's copy."""
    if shutil.which("curl") is None:
        pytest.fail("curl is not installed: run scripts/install-servers.sh")
    assert "https://localhost:8443/" in line, line
    here = compose_dir.parent / f"{compose_dir.name}-docs"
    here.mkdir(exist_ok=True)
    with contextlib.suppress(FileExistsError):
        (here / "compose").symlink_to(compose_dir)
    line = line.replace("localhost:8443", f"localhost:{port}")
    return subprocess.run(
        ["sh", "-c", line], cwd=here, capture_output=True, text=True, timeout=30, check=False
    )


def test_the_deploy_docs_curl_reaches_the_gateways_through_haproxy(
    deployment: tuple[int, int], secrets: Path
) -> None:
    with_certificate, without = _deploy_curls()
    result = _curl(with_certificate, secrets, deployment[0])
    assert result.returncode == 0, result.stderr
    assert "objects" in json.loads(result.stdout)
    assert _curl(without, secrets, deployment[0]).returncode != 0  # as the docs say: this fails
