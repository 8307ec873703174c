"""`fencegate lab report` judges history files; its exit status is the safety verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fencegate.cli import main
from fencegate.lab.history import Meta
from tests.lab.histories import clean_run, paused_holder


def histories(tmp_path: Path) -> tuple[Path, Path]:
    unsafe, safe = tmp_path / "unsafe.jsonl", tmp_path / "safe.jsonl"
    paused_holder(Meta("pause", "lock-only", "single", 1), fenced=False).dump(unsafe)
    clean_run(Meta("none", "lock-only", "single", 1)).dump(safe)
    return unsafe, safe


def test_report_prints_the_table_and_fails_on_an_unsafe_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unsafe, safe = histories(tmp_path)
    assert main(["lab", "report", str(unsafe), str(safe), "--html", str(tmp_path / "r.html")]) == 1
    out = capsys.readouterr().out
    assert "UNSAFE" in out
    assert f"report: {tmp_path / 'r.html'}" in out
    assert (tmp_path / "r.html").read_text().startswith("<!doctype html>")
    assert main(["lab", "report", str(safe)]) == 0


def test_report_json_carries_the_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unsafe, _ = histories(tmp_path)
    main(["lab", "report", "--json", "--no-events", str(unsafe)])
    document = json.loads(capsys.readouterr().out)
    assert document["runs"][0]["verdict"]["lost_updates"] == 1
    assert "history" not in document["runs"][0]


def test_a_file_that_is_not_a_history_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bogus = tmp_path / "bogus.jsonl"
    bogus.write_text("not json\n")
    assert main(["lab", "report", str(bogus)]) == 2
    captured = capsys.readouterr()
    assert "not JSON" in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(
    ("line", "change", "message"),
    [(1, {"final": "2"}, "final '2' is not an integer or null"),
     (1, {"meta": {"scenario": "none", "mode": "lock-only", "lock": "single", "seed": "1"}},
      "seed '1' is not an integer"),
     (2, {"client": 1}, "event client 1 is not a client's name"),
     (3, {"until": "later"}, "event until 'later' is not a number or null"),
     (3, {"lease": 7}, "event lease 7 is not a lease's name"),
     (4, {"kind": ["read"]}, "event kind ['read'] is not one of"),
     (4, {"detail": {}}, "event detail {} is not text")],
)  # fmt: skip
def test_a_malformed_field_is_one_line_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: int, change: dict[str, object], message: str
) -> None:
    path = tmp_path / "run.jsonl"
    paused_holder(Meta("pause", "lock-only", "single", 1), fenced=False).dump(path)
    lines = path.read_text().splitlines()
    lines[line - 1] = json.dumps(json.loads(lines[line - 1]) | change)
    path.write_text("\n".join(lines) + "\n")
    assert main(["lab", "report", str(path), "--html", str(tmp_path / "r.html")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (err,) = captured.err.splitlines()
    assert err.startswith(f"fencegate lab report: {path}:{line}: {message}")
    assert not (tmp_path / "r.html").exists()


def test_scenarios_lists_every_fault_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "scenarios"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == [
        "none",
        "pause",
        "delay",
        "clock-jump",
        "clock-skew",
        "restart",
        "restart-delayed",
        "failover",
        "token-regress",
        "proxy-delay",
        "proxy-delete",
    ]


def test_lab_run_refuses_a_single_client_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["lab", "run", "--scenario", "pause", "--clients", "1", "--workdir", str(tmp_path / "w")])
    assert code == 2
    assert "use --clients 2 or more" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_lab_run_refuses_a_scenario_that_does_not_apply_to_the_lock_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["lab", "run", "--scenario", "restart", "--lock", "etcd", "--workdir", str(tmp_path / "w")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "fencegate lab run: --scenario restart does not apply to --lock etcd: it faults a redis lock node "
        "(its memory, clock, replica or INCR); the etcd design keeps its lock in the Raft log of 3 etcd "
        "members"
    ]
    assert not (tmp_path / "w").exists()  # refused before anything started


def test_the_old_name_of_lock_only_is_still_accepted_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["lab", "run", "--scenario", "pause", "--mode", "redis-only", "--clients", "1",
            "--workdir", str(tmp_path / "w")]  # fmt: skip
    assert main(argv) == 2  # parsed; refused for the single client, before anything starts
    err = capsys.readouterr().err
    assert "--mode redis-only is now called lock-only" in err
    assert "use --clients 2 or more" in err
    with pytest.raises(SystemExit) as refused:
        main(["lab", "run", "--scenario", "pause", "--mode", "alone"])
    assert refused.value.code == 2
    assert "invalid choice: 'alone'" in capsys.readouterr().err


def test_lab_run_on_the_gateway_prints_json_progress_and_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report, workdir = tmp_path / "lab.html", tmp_path / "lab-runs"
    argv = ["lab", "run", "--scenario", "pause", "--mode", "fenced", "--clients", "2", "--ops", "1",
            "--json", "--report", str(report), "--svg", str(tmp_path / "svg"),
            "--workdir", str(workdir)]  # fmt: skip
    assert main(argv) == 0  # the fenced pause run is safe, as predicted
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    (run,) = document["runs"]
    assert run["meta"] == {"scenario": "pause", "mode": "fenced", "lock": "redlock", "seed": 1,
                           "tokens": "sqlite", "clients": 2, "store": "gateway"}  # fmt: skip
    assert run["expected_safe"] is True
    assert run["verdict"]["lost_updates"] == 0
    assert run["verdict"]["refused"] == 1  # the paused holder's write
    assert run["history"]["final"] == 1
    assert "[1/1] pause fenced redlock sqlite seed 1 ... SAFE, as predicted" in captured.err
    assert f"report: {report}" in captured.err
    assert report.read_text().startswith("<!doctype html>")
    assert (tmp_path / "svg" / "lab-pause-fenced.svg").read_text().startswith("<svg")
    (kept,) = workdir.glob("runs/*/history.jsonl")  # what `lab report` reads, as `lab --help` shows
    assert main(["lab", "report", str(kept), "--json", "--no-events"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["verdict"] == run["verdict"]


def test_lab_run_on_etcd_starts_its_cluster_and_prints_the_acceptance_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The session starts a 3-member etcd cluster itself; lock-only is unsafe under the pause, fenced safe."""
    argv = ["lab", "run", "--lock", "etcd", "--scenario", "pause", "--mode", "all", "--clients", "2",
            "--ops", "1", "--report", str(tmp_path / "lab.html")]  # fmt: skip
    assert main(argv) == 0  # every verdict as predicted
    rows = {
        line.split()[1]: line.split()
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("pause")
    }
    assert rows["lock-only"][2:4] == ["etcd", "-"]
    assert rows["lock-only"][-1] == "UNSAFE"
    assert rows["fenced"][2:4] == ["etcd", "etcd"]  # the lock key's create revision, no second source
    assert rows["fenced"][-1] == "SAFE"
    assert rows["fence-only"][-1] == "SAFE"


def test_scenarios_say_which_lock_designs_cannot_run_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "scenarios"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "any lock" in rows["pause"]
    assert "not --lock etcd" in rows["restart"]
    assert main(["lab", "scenarios", "--json"]) == 0
    document = {each["name"]: each for each in json.loads(capsys.readouterr().out)}
    assert document["pause"]["not_on_lock"] == {}
    assert set(document["restart"]["not_on_lock"]) == {"etcd"}
    assert "etcd session" in document["delay"]["not_on_lock"]["etcd"]
