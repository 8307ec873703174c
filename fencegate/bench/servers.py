"""HTTP servers a benchmark starts as processes of its own, and stops by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from fencegate.lab.cluster.servers import free_port

START_DEADLINE = 30.0


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def http_server(
    argv: Sequence[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[str, int]]:
    """Run `python -m ARGV --port P`; yield (url, pid) once it accepts; SIGTERM, then SIGKILL."""
    port = free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", *argv, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_DEADLINE
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(argv)} did not start; see {log}:\n{log.read_text()[-1500:]}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """User and system CPU seconds each of `pids` has used so far (one that is gone is left out)."""
    used = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        used[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return used


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two `cpu_seconds` readings; a process new in `after` counts from 0."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def rss_mib(pid: int) -> float:
    """Resident memory of `pid` in MiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
