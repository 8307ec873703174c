"""Ctrl-C stops a lab run at once: exit 130, one line, no traceback, and every process it started gone.

A terminal sends Ctrl-C's SIGINT to its foreground process group; the lab
starts its servers and clients in sessions of their own, so only the lab's
own process gets it and the lab must stop them. The run's Redis masters are
those its cluster helper records in RUN/cluster/cluster.json; the gateway and
the clients are the lab's other children.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from fencegate.cli import INTERRUPTED
from tests.lab.test_terminate import _children, _commands, _running, stop_if_running
from tests.waiting import eventually_sync

CLIENTS = 3
NODES = 6  # Redis nodes of a run: Redlock's 5 masters, and the one an INCR token source would use
EXIT_WITHIN = 15.0  # seconds from SIGINT to exit: stopping 6 redis-servers, 3 clients and the gateway


@contextlib.contextmanager
def _sigint_as_in_a_terminal() -> Iterator[None]:
    """A child inherits an ignored SIGINT (pytest started in the background by a script), and Python then
    never raises KeyboardInterrupt: start the lab with SIGINT handled, as a shell's foreground job is."""
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # reset to the default by exec
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _recorded_nodes(workdir: Path) -> set[int]:
    """The PIDs in the run's cluster state, once it lists every node with one (else none)."""
    for state in workdir.glob("runs/*/cluster/cluster.json"):
        with contextlib.suppress(OSError, ValueError):  # replaced whole as each node starts
            pids = {node["pid"] for node in json.loads(state.read_text())["nodes"]}
            if len(pids) == NODES and None not in pids:
                return pids
    return set()


def _clients_working(workdir: Path) -> bool:
    """Every client has recorded an event: its lease loop is under way."""
    logs = list(workdir.glob("runs/*/c*.jsonl"))
    return len(logs) == CLIENTS and all(log.stat().st_size > 0 for log in logs)


def test_ctrl_c_stops_a_lab_run_and_everything_it_started(tmp_path: Path) -> None:
    err = tmp_path / "stderr"
    workdir = tmp_path / "lab"
    argv = [sys.executable, "-m", "fencegate.cli", "lab", "run", "--scenario", "none", "--mode", "fenced",
            "--clients", str(CLIENTS), "--ops", "5000", "--workdir", str(workdir),
            "--report", str(tmp_path / "report.html")]  # fmt: skip
    with err.open("w") as stderr, _sigint_as_in_a_terminal():
        run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    try:
        eventually_sync(lambda: "[1/1]" in err.read_text(), within=60, what="the run's progress line")
        eventually_sync(lambda: bool(_recorded_nodes(workdir)), within=30, what="the Redis nodes recorded")
        eventually_sync(lambda: _clients_working(workdir), within=30, what="every client at work")
        started = _children(run.pid)  # the gateway, the Redis nodes and the clients, with start times
        nodes = _recorded_nodes(workdir)
        assert nodes <= started.keys(), (nodes, started)
        assert len(started) >= 1 + NODES + CLIENTS, _commands(started)
        os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground group
        assert run.wait(timeout=EXIT_WITHIN) == INTERRUPTED
    finally:
        stop_if_running(run)
    lines = err.read_text().splitlines()
    assert "Traceback" not in err.read_text(), lines
    assert lines == ["[1/1] none fenced redlock sqlite seed 1 ... stopped", "fencegate lab run: interrupted"]
    try:
        eventually_sync(
            lambda: not any(_running(pid, at) for pid, at in started.items()),
            within=EXIT_WITHIN,
            what="every process the run started to exit",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still running: {_commands(started)}") from None
