"""Bad command-line input: each is one line on stderr and exit 2, changes nothing, never a traceback."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fencegate.cli import USAGE
from tests.cli.test_errors import fencegate

HUGE = "99999999999999999999999"


def _files(directory: Path) -> dict[str, str]:
    """Every file in `directory` and its digest: a side file (`-wal`, `-shm`, `-journal`) counts too."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(directory.iterdir())}


def _plain_database(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (x)")
    conn.close()


@pytest.mark.parametrize(
    ("make", "reason"),
    [(lambda p: p.write_bytes(b""), "is an empty file"),
     (lambda p: p.write_bytes(b"hello, not a database\n"), "is not a SQLite database"),
     (_plain_database, "without fencegate's tables")],
    ids=["empty", "not-a-database", "no-fencegate-schema"],
)  # fmt: skip
def test_audit_verify_changes_no_file_it_is_given(tmp_path: Path, make: object, reason: str) -> None:
    store = tmp_path / "empty.json"
    make(store)  # type: ignore[operator]
    before = _files(tmp_path)
    code, err = fencegate("audit", "verify", "--storage", f"sqlite:///{store}", cwd=tmp_path)
    assert (code, len(err)) == (USAGE, 1), err
    assert reason in err[0]
    assert str(store) in err[0]
    assert "fencegate.db in its --data-dir" in err[0]
    assert _files(tmp_path) == before  # byte for byte, and no -wal or -shm beside it


def test_keys_list_refuses_a_missing_file_as_serve_does(tmp_path: Path) -> None:
    code, err = fencegate("keys", "list", "--file", "nope.json", cwd=tmp_path)
    assert (code, err) == (USAGE, [
        "fencegate keys list: API key file nope.json does not exist; "
        "create it with `fencegate keys add`"])  # fmt: skip
    assert not (tmp_path / "nope.json").exists()


@pytest.mark.parametrize(
    "argv",
    [("lab", "report", "bad.txt"), ("model", "doc", "--check", "bad.txt"), ("model", "doc", "bad.txt")],
)
def test_a_file_that_is_not_utf8(tmp_path: Path, argv: tuple[str, ...]) -> None:
    (tmp_path / "bad.txt").write_bytes(b"\xff\n")
    code, err = fencegate(*argv, cwd=tmp_path)
    assert (code, len(err)) == (USAGE, 1), err
    assert "bad.txt" in err[0]
    assert "not UTF-8" in err[0]
    assert (tmp_path / "bad.txt").read_bytes() == b"\xff\n"


@pytest.mark.parametrize("check", [("--check",), ()])
def test_model_doc_on_a_file_without_markers(tmp_path: Path, check: tuple[str, ...]) -> None:
    (tmp_path / "k.json").write_text('{"keys": []}\n')
    code, err = fencegate("model", "doc", *check, "k.json", cwd=tmp_path)
    assert (code, len(err)) == (USAGE, 1), err
    assert "k.json has no model-table markers" in err[0]
    assert "docs/model.md" in err[0]
    assert (tmp_path / "k.json").read_text() == '{"keys": []}\n'


@pytest.mark.parametrize(
    ("argv", "option", "bound"),
    [(("cluster", "up", "--redis", HUGE), "--redis", "64"),
     (("cluster", "up", "--etcd", HUGE), "--etcd", "9"),
     (("cluster", "up", "--gateways", HUGE), "--gateways", "16"),
     (("cluster", "up", "--zookeeper-ensemble", HUGE), "--zookeeper-ensemble", "9"),
     (("lab", "run", "--scenario", "none", "--mode", "fenced", "--clients", HUGE), "--clients", "64"),
     (("lab", "run", "--ops", HUGE), "--ops", "10000"),
     (("lab", "run", "--seeds", HUGE), "--seeds", "1000")],
)  # fmt: skip
def test_a_count_past_its_bound_is_refused_before_anything_starts(
    tmp_path: Path, argv: tuple[str, ...], option: str, bound: str
) -> None:
    code, err = fencegate(*argv, "--dir" if argv[0] == "cluster" else "--workdir", "out", cwd=tmp_path)
    prog = f"fencegate {argv[0]} {argv[1]}"
    assert (code, err) == (USAGE, [
        f"{prog}: argument {option}: {HUGE}: give at most {bound}; see `{prog} --help`"])  # fmt: skip
    assert not (tmp_path / "out").exists()  # no server, client or state dir was started or made
    helped = subprocess.run(
        [sys.executable, "-m", "fencegate.cli", argv[0], argv[1], "--help"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, check=True,
    )  # fmt: skip
    assert f"to {bound}" in " ".join(helped.stdout.split())  # --help shows the bound


@pytest.mark.parametrize("token", ["-1", "0"])
def test_force_unlock_refuses_a_token_below_1(tmp_path: Path, token: str) -> None:
    code, err = fencegate("lock", "force-unlock", "--yes", "--token", token, "invoices", cwd=tmp_path)
    prog = "fencegate lock force-unlock"
    assert (code, err) == (USAGE, [
        f"{prog}: argument --token: {token}: a fencing token is 1 or more; give the one `inspect` shows; "
        f"see `{prog} --help`"])  # fmt: skip


def test_a_bad_log_level_in_the_environment_is_refused_like_the_flag(tmp_path: Path) -> None:
    code, err = fencegate("serve", cwd=tmp_path, env={"FENCEGATE_LOG_LEVEL": "LOUD"})
    assert (code, err) == (USAGE, [
        "fencegate serve: FENCEGATE_LOG_LEVEL 'LOUD' is not a log level; give one of DEBUG, INFO, WARNING, "
        "ERROR, or unset it"])  # fmt: skip
    assert not (tmp_path / ".state").exists()  # refused before the gateway made its data dir


@pytest.mark.parametrize(
    ("argv", "prog", "word"),
    [(("--frob",), "fencegate", "--frob"), (("keys", "--nope"), "fencegate keys", "--nope")],
)
def test_an_unknown_option_is_named_before_a_missing_command(
    tmp_path: Path, argv: tuple[str, ...], prog: str, word: str
) -> None:
    code, err = fencegate(*argv, cwd=tmp_path)
    assert (code, err) == (USAGE, [f"{prog}: unrecognized arguments: {word}; see `{prog} --help`"])
