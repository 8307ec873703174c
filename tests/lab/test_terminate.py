"""SIGTERM stops a lab run the way Ctrl-C does: every server and client process it started is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from fencegate.lab.cluster import TERMINATED
from tests.waiting import eventually_sync


def _children(pid: int) -> dict[int, str]:
    """Each live child of `pid` and its start time (which tells it from a later process with its PID)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and int(stat[1]) == pid:
                found[int(entry)] = stat[19]
    return found


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: state, ppid, ..., start time at index 19; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _commands(started: dict[int, str]) -> str:
    """What each process still running runs, for a failure's message."""
    alive = [pid for pid, at in started.items() if _running(pid, at)]
    return "; ".join(f"{pid}: {Path(f'/proc/{pid}/cmdline').read_text()[:80]!r}" for pid in alive)


def _running(pid: int, started: str) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[19] == started and stat[0] != "Z"


def stop_if_running(run: subprocess.Popen[bytes]) -> None:
    """A run the test failed to end: stopped by SIGTERM (its own tested way), killed if that hangs."""
    if run.poll() is None:
        run.send_signal(signal.SIGTERM)
        try:
            run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()


def test_sigterm_stops_a_lab_run_and_everything_it_started(tmp_path: Path) -> None:
    err = tmp_path / "stderr"
    argv = [sys.executable, "-m", "fencegate.cli", "lab", "run", "--scenario", "none", "--ops", "200"]
    with err.open("w") as stderr:
        run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        # the second run is under way, with its Redis masters and its client processes up
        eventually_sync(lambda: "[2/3]" in err.read_text(), within=60, what="the second run")
        eventually_sync(lambda: len(_children(run.pid)) >= 8, within=60, what="masters and clients")
        started = _children(run.pid)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == TERMINATED
    finally:
        stop_if_running(run)
    assert "stopped by SIGTERM" in err.read_text()
    eventually_sync(
        lambda: not any(_running(pid, at) for pid, at in started.items()),
        what="every process the run started to exit",
    )


def test_sigterm_during_cluster_up_stops_the_servers_already_started(tmp_path: Path) -> None:
    """`cluster up` is synchronous: SIGTERM is raised where it stands, and its failure path stops what
    started (ZooKeeper and PostgreSQL after the Redis masters keep it starting long enough)."""
    err = tmp_path / "stderr"
    state = tmp_path / "cluster"
    argv = [sys.executable, "-m", "fencegate.cli", "cluster", "up", "--redis", "2", "--postgres",
            "--zookeeper", "--dir", str(state)]  # fmt: skip
    with err.open("w") as stderr:
        up = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        eventually_sync(lambda: len(_children(up.pid)) >= 1, within=60, what="a first server")
        started = _children(up.pid)
        up.send_signal(signal.SIGTERM)
        assert up.wait(timeout=60) == TERMINATED
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    assert "terminated" in err.read_text()
    eventually_sync(
        lambda: not any(_running(pid, at) for pid, at in started.items()),
        what=f"every server cluster up started to exit ({_commands(started)})",
    )
