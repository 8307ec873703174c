"""Settings from flags and from environment variables of the same names; bad values say the fix."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fencegate.cli import build_parser, main
from gateway.config import Settings
from gateway.errors import BadSetting
from gateway.settings_cli import add_arguments, options_of, settings_from


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_are_an_embedded_sqlite_on_loopback() -> None:
    settings = settings_from(parse(), {})
    assert (settings.host, settings.port, settings.upstream, settings.loopback) == (
        "127.0.0.1",
        8080,
        None,
        True,
    )
    assert settings.storage_url == f"sqlite:///{(Path('.state/gateway') / 'fencegate.db').resolve()}"
    assert settings.event_loop == "uvloop"


def test_environment_variables_have_the_flag_names() -> None:
    env = {
        "FENCEGATE_STORAGE": "postgresql://pg@db/fg",
        "FENCEGATE_PORT": "9000",
        "FENCEGATE_MAX_BODY": "1024",
        "FENCEGATE_REQUEST_TIMEOUT": "2.5",
        "FENCEGATE_DATA_DIR": "/var/lib/fg",
    }
    settings = settings_from(parse(), env)
    got = (
        settings.storage_url,
        settings.port,
        settings.max_body,
        settings.request_timeout,
        settings.data_dir,
    )
    assert got == ("postgresql://pg@db/fg", 9000, 1024, 2.5, Path("/var/lib/fg"))


def test_a_flag_wins_over_the_environment() -> None:
    settings = settings_from(parse("--port", "7000", "--max-body", "5"), {"FENCEGATE_PORT": "9000"})
    assert (settings.port, settings.max_body) == (7000, 5)


@pytest.mark.parametrize(
    ("argv", "message"),
    [(("--port", "70000"),  "out of range"), (("--port", "x"), "not a whole number"),
     (("--request-timeout", "0"), "positive"), (("--request-timeout", "nan"), "positive"),
     (("--idle-timeout", "inf"), "positive"), (("--upstream", "ftp://x"), "http"),
     (("--max-body", "-1"), "negative"), (("--event-loop", "trio"), "not one of uvloop, asyncio"),
     (("--commit-lanes", "0"), "at least 1")],
)  # fmt: skip
def test_bad_values_are_refused_with_the_fix(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(BadSetting, match=message):
        settings_from(parse(*argv), {})


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(AttributeError):
        settings.port = 1  # type: ignore[misc]


def test_serve_is_a_fencegate_command() -> None:
    args = build_parser().parse_args(["serve", "--port", "0"])
    assert args.command == "serve"
    assert args.port == "0"


@pytest.mark.parametrize(
    ("env", "message"),
    [({"FENCEGATE_ALLOW_OPEN": "maybe"}, "FENCEGATE_ALLOW_OPEN 'maybe' is not a yes/no value"),
     ({"FENCEGATE_REQUEST_TIMEOUT": "soon"}, "FENCEGATE_REQUEST_TIMEOUT 'soon' is not a number"),
     ({"FENCEGATE_STORAGE": "mysql://x/y"}, "storage 'mysql://x/y': unsupported storage")],
)  # fmt: skip
def test_bad_variables_are_refused_with_their_name(env: dict[str, str], message: str) -> None:
    with pytest.raises(BadSetting, match=message):
        settings_from(parse(), env)


def test_yes_no_values_read_alike_from_the_flag_and_the_environment() -> None:
    assert settings_from(parse("--allow-open", "--host", "10.0.0.5"), {}).allow_open
    assert settings_from(parse("--host", "10.0.0.5"), {"FENCEGATE_ALLOW_OPEN": "yes"}).allow_open
    assert not settings_from(parse(), {"FENCEGATE_ALLOW_OPEN": "0"}).allow_open


def test_every_flag_shows_its_default_and_its_variable() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert "(default: 8080; env FENCEGATE_PORT)" in text
    assert "(default: off; env FENCEGATE_ALLOW_OPEN)" in text


def test_a_setting_of_a_type_without_a_parser_fails_at_once() -> None:
    @dataclass(frozen=True)
    class Odd:
        ratio: complex = field(default=1j, metadata={"help": "not a type the table knows"})

    with pytest.raises(TypeError, match=r"Odd\.ratio: no parser"):
        options_of(Odd)


def test_commit_lanes_come_from_the_environment_too() -> None:
    assert settings_from(parse(), {"FENCEGATE_COMMIT_LANES": "1"}).commit_lanes == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [(("--tls-cert", "c.pem"), "together"), (("--tls-key", "k.pem"), "together"),
     (("--tls-client-ca", "ca.pem"), "needs HTTPS")],
)  # fmt: skip
def test_tls_settings_come_whole(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(BadSetting, match=message):
        settings_from(parse(*argv), {})


def test_tls_settings_from_the_environment_and_client_certificates_are_not_open() -> None:
    env = {"FENCEGATE_TLS_CERT": "/etc/fg/gw.pem", "FENCEGATE_TLS_KEY": "/etc/fg/gw.key"}
    with pytest.raises(BadSetting, match="--tls-client-ca"):  # a public address needs keys or mTLS
        settings_from(parse("--host", "10.0.0.7"), env)
    settings = settings_from(
        parse("--host", "10.0.0.7"), {**env, "FENCEGATE_TLS_CLIENT_CA": "/etc/fg/ca.pem"}
    )
    assert (settings.tls_cert, settings.tls_key, settings.mutual_tls) == (
        Path("/etc/fg/gw.pem"),
        Path("/etc/fg/gw.key"),
        True,
    )


def test_unreadable_certificates_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.pem").write_text("not a certificate\n")
    bad = str(tmp_path / "bad.pem")
    argv = ["serve", "--port", "0", "--data-dir", str(tmp_path), "--tls-cert", bad, "--tls-key", bad]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fencegate serve: cannot load the TLS certificate")
    assert "\n" not in err
