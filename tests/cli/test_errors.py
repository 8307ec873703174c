"""Every failure a user can cause is one line on stderr and the exit code of its kind, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fencegate import cli
from fencegate.cli import UNAVAILABLE, USAGE, error_code
from fencegate.lab.cluster import ClusterError, MissingServerError
from fencegate.lab.cluster.errors import ClusterArgumentError
from gateway.errors import BadSetting, CannotListen


def fencegate(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    """Run the real command; its exit code and its stderr lines."""
    run = subprocess.run(
        [sys.executable, "-m", "fencegate.cli", *argv],
        capture_output=True, text=True, timeout=120, cwd=cwd, env={**os.environ, **(env or {})}, check=False,
    )  # fmt: skip
    assert "Traceback" not in run.stderr, run.stderr
    return run.returncode, run.stderr.splitlines()


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_port_in_use(tmp_path: Path, taken_port: int) -> None:
    code, err = fencegate("serve", "--port", str(taken_port), cwd=tmp_path)
    assert (code, len(err)) == (UNAVAILABLE, 1)
    assert "port is in use" in err[0]
    assert "--port" in err[0]
    assert not (tmp_path / ".state").exists()  # refused before storage was opened


def test_an_address_this_machine_does_not_have(tmp_path: Path) -> None:
    code, err = fencegate("serve", "--host", "10.255.255.1", "--allow-open", cwd=tmp_path)
    assert (code, err) == (UNAVAILABLE, [
        "fencegate serve: cannot listen on 10.255.255.1:8080: this machine has no address 10.255.255.1; "
        "give one of its own, or 0.0.0.0 for all of them"])  # fmt: skip


def test_a_bad_storage_url_is_refused_before_the_banner(tmp_path: Path) -> None:
    code, err = fencegate("serve", "--storage", "not a url", cwd=tmp_path)
    use = "use sqlite:///PATH or postgresql://USER@HOST/DB"
    assert (code, err) == (USAGE, [f"fencegate serve: storage 'not a url': not a URL; {use}"])


def test_a_bad_value_reads_the_same_from_a_flag_and_from_the_environment(tmp_path: Path) -> None:
    flag = fencegate("serve", "--port", "x", cwd=tmp_path)
    env = fencegate("serve", cwd=tmp_path, env={"FENCEGATE_PORT": "x"})
    assert flag == (USAGE, ["fencegate serve: --port 'x' is not a whole number"])
    assert env == (USAGE, ["fencegate serve: FENCEGATE_PORT 'x' is not a whole number"])


@pytest.mark.parametrize(
    ("content", "reason"),
    [('{"nodes": [', "cannot read the cluster state"), ('{"nodes": [{"x": 1}]}', "is not a cluster state"),
     ("[]", "is not a cluster state")],
)  # fmt: skip
def test_a_malformed_cluster_state(tmp_path: Path, content: str, reason: str) -> None:
    (tmp_path / "cluster.json").write_text(content)
    code, err = fencegate("cluster", "status", "--dir", str(tmp_path), cwd=tmp_path)
    assert (code, len(err)) == (USAGE, 1)
    assert reason in err[0]


def test_no_cluster_state(tmp_path: Path) -> None:
    code, err = fencegate("cluster", "down", "--dir", str(tmp_path / "none"), cwd=tmp_path)
    assert (code, len(err)) == (USAGE, 1)
    assert "start one with `fencegate cluster up`" in err[0]


def test_a_server_program_that_is_not_installed(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    argv = ("lab", "run", "--scenario", "none", "--mode", "fenced", "--clients", "2", "--ops", "1")
    code, err = fencegate(*argv, "--workdir", str(tmp_path / "w"), cwd=tmp_path, env={"PATH": str(empty)})
    assert code == UNAVAILABLE
    assert err[-1].startswith("fencegate lab run: redis-server not found: install it with `apt-get install")
    assert err[-2].endswith("stopped")  # the progress line is closed before the error is said


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["serve", "--bogus"], "fencegate serve: unrecognized arguments: --bogus; see `fencegate serve --help`"),
     (["keys", "list"], "fencegate keys list: give the key file with --file or $FENCEGATE_API_KEYS"),
     (["audit", "verify", "--storage", "mysql://x/y"], "fencegate audit verify: storage 'mysql://x/y': "
      "unsupported storage; use sqlite:///PATH or postgresql://USER@HOST/DB"),
     (["cluster", "check", "--gateway", "http://127.0.0.1:1"],
      "fencegate cluster check: give --dir, or --gateway, --redis and --tokens"),
     (["lab", "run", "--scenario", "pause", "--clients", "1"], "fencegate lab run: every scenario needs a "
      "holder and a challenger: use --clients 2 or more"),
     (["model", "check", "--nodes", "2"], "fencegate model check: --nodes 2: use 1, 3 or 5 Redis masters "
      "(an odd quorum)"),
     (["lock", "inspect", "--masters", "redis://127.0.0.1:1", "--node-timeout", "20", "x"],
      "fencegate lock inspect: --node-timeout 20: give a number of seconds above 0 and below 10, e.g. 1")],
)  # fmt: skip
def test_a_wrong_request_is_exit_2_in_every_command(tmp_path: Path, argv: list[str], message: str) -> None:
    env = {"FENCEGATE_API_KEYS": "", "FENCEGATE_STORAGE": ""}
    assert fencegate(*argv, cwd=tmp_path, env=env) == (USAGE, [message])


def files_under(path: Path) -> set[Path]:
    return set(path.rglob("*"))


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    """A regular file where a directory is needed."""
    path = tmp_path / "a-file"
    path.write_text("kept")
    return path


# (argv, the option): every path is under a regular file, so none can be written
OUTPUT_PATHS = [
    (["bench", "--quick", "--only", "leases", "--plot", "{f}/charts"], "--plot"),
    (["lab", "run", "--scenario", "pause", "--report", "{f}/lab.html"], "--report"),
    (["lab", "headline", "--svg", "{f}/svg"], "--svg"),
    (["lab", "all", "--workdir", "{f}/runs"], "--workdir"),
    (["lab", "report", "h.jsonl", "--html", "{f}/r.html"], "--html"),
    (["model", "check", "--history-dir", "{f}/histories"], "--history-dir"),
    (["model", "check", "--report", "{f}/model.html"], "--report"),
    (["cluster", "up", "--redis", "1", "--dir", "{f}/cluster"], "--dir"),
    (["soak", "--state-dir", "{f}/soak"], "--state-dir"),
]


@pytest.mark.parametrize(("argv", "option"), OUTPUT_PATHS, ids=[" ".join(a[:2]) for a, _ in OUTPUT_PATHS])
def test_an_output_path_that_cannot_be_written_is_refused_before_anything_starts(
    tmp_path: Path, a_file: Path, argv: list[str], option: str
) -> None:
    before = files_under(tmp_path)
    code, err = fencegate(*(word.format(f=a_file) for word in argv), cwd=tmp_path)
    assert (code, len(err)) == (USAGE, 1)
    assert f"argument {option}: {a_file}/" in err[0]
    assert f"{a_file} is not a directory; give a path under a directory" in err[0]
    assert files_under(tmp_path) == before  # no server's files, no report, no state


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["cluster", "up", "--dir", "/proc/fencegate"],
      "argument --dir: /proc/fencegate: cannot create files in /proc"),
     (["lab", "report", "h.jsonl", "--html", "."], "argument --html: . is a directory; give a file name")],
)  # fmt: skip
def test_a_directory_that_refuses_files_or_a_file_that_is_a_directory(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    code, err = fencegate(*argv, cwd=tmp_path)
    assert (code, len(err)) == (USAGE, 1)
    assert message in err[0]
    assert not Path("/proc/fencegate").exists()


@pytest.mark.parametrize(
    ("argv", "option", "fix"),
    [(["cluster", "check", "--dir", "x", "--resources", "0"], "--resources", "0: give 1 or more"),
     (["cluster", "check", "--dir", "x", "--workers", "0"], "--workers", "0: give 1 or more"),
     (["cluster", "check", "--dir", "x", "--seconds", "-1"], "--seconds",
      "-1: give a number of seconds above 0"),
     (["cluster", "up", "--redis", "-1"], "--redis", "-1: give 0 or more"),
     (["cluster", "up", "--etcd", "-3"], "--etcd", "-3: give 0 or more"),
     (["soak", "--resources", "0"], "--resources", "0: give 1 or more"),
     (["soak", "--clients", "0"], "--clients", "0: give 1 or more"),
     (["soak", "--writers", "-1"], "--writers", "-1: give 1 or more"),
     (["soak", "--in-flight", "0"], "--in-flight", "0: give 1 or more"),
     (["soak", "--raw-examples", "0"], "--raw-examples", "0: give 1 or more"),
     (["soak", "--duration", "nan"], "--duration", "nan: give a number of seconds above 0"),
     (["soak", "--bench-seconds", "-1"], "--bench-seconds", "-1: give a number of seconds (0 or more)")],
)  # fmt: skip
def test_a_count_or_duration_out_of_range_is_refused_as_it_is_parsed(
    tmp_path: Path, argv: list[str], option: str, fix: str
) -> None:
    command = " ".join(argv[: 2 if argv[0] == "cluster" else 1])
    assert fencegate(*argv, cwd=tmp_path) == (
        USAGE, [f"fencegate {command}: argument {option}: {fix}; see `fencegate {command} --help`"]
    )  # fmt: skip
    assert files_under(tmp_path) == set()


def test_no_redis_is_still_a_cluster_up_request() -> None:
    from fencegate.cli import build_parser

    assert build_parser().parse_args(["cluster", "up", "--redis", "0", "--zookeeper"]).redis == 0


@pytest.mark.parametrize("where", ["{f}/keys.json", "/proc/keys.json"])
def test_a_key_file_that_cannot_be_written_is_one_line_and_nothing_is_made(
    tmp_path: Path, a_file: Path, where: str
) -> None:
    path = where.format(f=a_file)
    code, err = fencegate("keys", "add", "billing", "--prefix", "billing/", "--file", path, cwd=tmp_path)
    assert (code, len(err)) == (USAGE, 1)
    assert f"API keys {'from' if str(a_file) in path else 'to'} {path}: " in err[0]
    assert files_under(tmp_path) == {a_file}
    assert not any(Path("/proc").glob(".keys.json.*"))


@pytest.mark.parametrize("where", ["{f}/data", "{f}", "/proc/fencegate"])
def test_a_data_dir_that_cannot_be_made_is_refused_before_the_banner(
    tmp_path: Path, a_file: Path, where: str
) -> None:
    path = where.format(f=a_file)
    code, err = fencegate("serve", "--port", "0", "--data-dir", path, cwd=tmp_path)
    assert (code, len(err)) == (USAGE, 1)  # one line: no "running OPEN" banner was logged before it
    assert err[0].startswith(f"fencegate serve: data dir {path} cannot be made (")
    assert err[0].endswith("give --data-dir a directory you can write, or --storage a URL")
    assert files_under(tmp_path) == {a_file}


def test_soak_without_wrk_is_a_missing_tool(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    code, err = fencegate("soak", cwd=tmp_path, env={"PATH": str(empty)})
    assert (code, err) == (UNAVAILABLE, [
        "fencegate soak: wrk is not installed; run `make servers`, or pass --bench-seconds 0"])  # fmt: skip
    assert files_under(tmp_path) == {empty}


def test_the_kind_of_an_error_is_its_exit_code() -> None:
    assert error_code(BadSetting("x")) == USAGE
    assert error_code(ClusterArgumentError("x")) == USAGE
    assert error_code(CannotListen("h", 1, OSError(98, "in use"))) == UNAVAILABLE
    assert error_code(MissingServerError("redis-server", package="redis-server")) == UNAVAILABLE
    assert error_code(ClusterError("x")) == UNAVAILABLE
    assert error_code(ValueError("a bug, not a user's mistake")) is None
    assert error_code(KeyError("a bug")) is None


def test_ctrl_c_while_a_command_loads_is_interrupted_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command's modules load after the parse (seconds for `lab`); Ctrl-C then is 130 and one line."""

    def interrupted(name: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "import_module", interrupted)
    assert cli.main(["lab", "run", "--scenario", "pause"]) == cli.INTERRUPTED
    assert capsys.readouterr().err == "fencegate: interrupted\n"
