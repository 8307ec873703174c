"""A bad URL or number on the command line is one line and exit 2, never a traceback, never its password.

Each case runs the real command. The password in every URL is `sekrit`: no line may show it, and a
message that repeats the URL shows it masked (`u:***`), as lockclient's `redact` writes it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fencegate.cli import USAGE
from gateway.config import MAX_COMMIT_LANES, MAX_GROUP_COMMIT, MAX_MAX_BODY
from tests.cli.test_errors import fencegate

PASSWORD = "sekrit"
# a cluster check that never gets as far as its gateway, Redis or token source
CHECK = (
    "cluster",
    "check",
    "--gateway",
    "http://127.0.0.1:1",
    "--redis",
    "redis://127.0.0.1:1",
    "--seconds",
    "1",
)


def refused(tmp_path: Path, *argv: str) -> str:
    """Run the command; assert it is refused as bad input in one line without the password; the line."""
    code, err = fencegate(*argv, cwd=tmp_path)
    assert (code, len(err)) == (USAGE, 1), err
    assert PASSWORD not in err[0]
    assert not (tmp_path / ".state").exists()  # refused before the gateway opened its storage
    return err[0]


@pytest.mark.parametrize(
    ("argv", "reason"),
    [(("serve", "--port", "0", "--tokens", "zookeeper://h:abc"), "ZooKeeper host 'h:abc' is not host[:port]"),
     (("serve", "--port", "0", "--tokens", "zookeeper://127.0.0.1:99999"), "Port out of range"),
     (("serve", "--port", "0", "--tokens", "zookeeper://u:sekrit@"), "take no user or password"),
     (("serve", "--port", "0", "--tokens", "zookeeper://h:1,,h:2"), "ZooKeeper host '' is not host[:port]"),
     ((*CHECK, "--tokens", "zookeeper://u:sekrit@h:abc"), "take no user or password"),
     (("serve", "--port", "0", "--tokens", "etcd://u:sekrit@h:1"), "take no user or password"),
     (("serve", "--port", "0", "--tokens", "redis://u:sekrit@127.0.0.1:abc?unsafe=1"), "'redis://u:***@"),
     (("serve", "--port", "0", "--tokens", "postgresql://u:sekrit@h:99999/db"),
      "port 99999 is out of range")],
)  # fmt: skip
def test_a_bad_token_source_host_or_port(tmp_path: Path, argv: tuple[str, ...], reason: str) -> None:
    assert reason in refused(tmp_path, *argv)


@pytest.mark.parametrize(
    ("command", "url", "reason"),
    [("serve", "postgresql://u:sekrit@127.0.0.1:abc/db", "HOST:PORT cannot be read"),
     ("serve", "postgresql://u:sekrit@[::1/db", "HOST:PORT cannot be read"),
     ("serve", "postgresql://u:sekrit@127.0.0.1:99999/db", "port 99999 is out of range"),
     ("audit", "postgresql://u:sekrit@127.0.0.1:abc/db", "HOST:PORT cannot be read"),
     ("audit", "postgresql://u:sekrit@127.0.0.1:99999/db", "port 99999 is out of range"),
     ("serve", "mysql://u:sekrit@h/db", "'mysql://u:***@h/db': unsupported storage"),
     ("audit", "mysql://u:sekrit@h/db", "'mysql://u:***@h/db': unsupported storage"),
     ("audit", "http://u:sekrit@h/db", "'http://u:***@h/db': unsupported storage")],
)  # fmt: skip
def test_a_bad_storage_url(tmp_path: Path, command: str, url: str, reason: str) -> None:
    argv = (
        ("serve", "--port", "0", "--storage", url)
        if command == "serve"
        else ("audit", "verify", "--storage", url)
    )
    line = refused(tmp_path, *argv)
    assert reason in line
    assert "storage 'postgresql://u:***@" in line or "unsupported" in line  # the URL, masked


def test_a_master_url_that_cannot_be_parsed(tmp_path: Path) -> None:
    line = refused(tmp_path, "lock", "inspect", "--masters", "redis://:sekrit@[::1", "r")
    assert "master 'redis://:***@[::1': it cannot be read as a URL" in line


@pytest.mark.parametrize(
    ("argv", "shown"),
    [(("serve", "--port", "0", "--tokens", "http://u:sekrit@x"), "unknown token source URL 'http://u:***@x'"),
     ((*CHECK, "--tokens", "mysql://u:sekrit@h"), "unknown token source URL 'mysql://u:***@h'"),
     (("serve", "--port", "0", "--upstream", "ftp://u:sekrit@x"),
      "upstream 'ftp://u:***@x' is not an http(s) URL"),
     (("serve", "--port", "0", "--upstream", "http://u:sekrit@[::1"), "upstream 'http://u:***@[::1' is not"),
     (("cluster", "check", "--gateway", "ftp://u:sekrit@x", "--redis", "redis://127.0.0.1:1",
       "--tokens", "sqlite:///t.db", "--seconds", "1"), "base_url 'ftp://u:***@x' must be")],
)  # fmt: skip
def test_a_refused_url_is_shown_with_its_password_masked(
    tmp_path: Path, argv: tuple[str, ...], shown: str
) -> None:
    assert shown in refused(tmp_path, *argv)


def test_the_unsafe_redis_source_warning_masks_the_password(tmp_path: Path) -> None:
    """The gateway serves on with a token source it cannot reach: its warnings name the source masked."""
    url = f"redis://u:{PASSWORD}@127.0.0.1:1?unsafe=1"
    with subprocess.Popen(
        [sys.executable, "-m", "fencegate.cli", "serve", "--port", "0", "--tokens", url],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    ) as gateway:  # fmt: skip
        assert gateway.stderr is not None
        lines = []
        try:
            for line in gateway.stderr:
                lines.append(line)
                if "listening on" in line:
                    break
        finally:
            gateway.send_signal(signal.SIGTERM)
            lines += gateway.stderr.readlines()
            gateway.wait(timeout=30)
    text = "".join(lines)
    assert "Traceback" not in text
    assert "Redis INCR at redis://u:***@127.0.0.1:1" in text
    assert PASSWORD not in text


@pytest.mark.parametrize(
    ("flag", "most"),
    [
        ("--max-body", MAX_MAX_BODY),
        ("--group-commit", MAX_GROUP_COMMIT),
        ("--commit-lanes", MAX_COMMIT_LANES),
    ],
)
def test_a_size_above_its_maximum(tmp_path: Path, flag: str, most: int) -> None:
    line = refused(tmp_path, "serve", "--port", "0", flag, "99999999999999999999999")
    assert line == f"fencegate serve: {flag} '99999999999999999999999' is out of range; give at most {most}"
    assert refused(tmp_path, "serve", "--port", "0", flag, str(most + 1)).endswith(f"give at most {most}")


def test_the_maximums_are_in_the_help(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "fencegate.cli", "serve", "--help"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, check=True,
    )  # fmt: skip
    text = " ".join(run.stdout.split())
    for most in (65535, MAX_MAX_BODY, MAX_GROUP_COMMIT, MAX_COMMIT_LANES):
        assert f"at most {most} (default:" in text


@pytest.mark.parametrize("digits", [30, 5000])
def test_a_huge_port_is_out_of_range_in_a_short_line(tmp_path: Path, digits: int) -> None:
    line = refused(tmp_path, "serve", "--port", "9" * digits)
    assert "out of range" in line
    assert "9" * 41 not in line  # no more of the value than 40 characters
    assert len(line) < 150


@pytest.mark.parametrize(
    ("argv", "shown"),
    [(("postgresql://u:sekrit@h/db",), "invalid choice: 'postgresql://u:***@h/db'"),
     (("audit", "postgresql://u:sekrit@h/db"), "invalid choice: 'postgresql://u:***@h/db'"),
     (("audit", "verify", "postgresql://u:sekrit@h/db"), "unrecognized arguments: postgresql://u:***@h/db"),
     (("serve", "--bogus=redis://:sekrit@h:1"), "unrecognized arguments: --bogus=redis://:***@h:1"),
     (("serve", "--port", "postgresql://u:sekrit@h/db"), "--port 'postgresql://u:***@h/db' is not a whole"),
     (("lab", "run", "--clients", "redis://u:sekrit@h"), "'redis://u:***@h'")],
)  # fmt: skip
def test_a_url_in_the_wrong_place_is_repeated_masked(
    tmp_path: Path, argv: tuple[str, ...], shown: str
) -> None:
    """argparse repeats what it was given: a URL pasted where a command, a flag or a number belongs."""
    assert shown in refused(tmp_path, *argv)
