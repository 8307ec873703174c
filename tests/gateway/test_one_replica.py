"""`--upstream-ordering trust-path` runs one replica per database: real `fencegate serve` processes.

On SQLite (one file) and on PostgreSQL (a database of its own): a second
replica is refused at start while the first beats, one line and exit 2 naming
the instance that holds the claim and its last heartbeat; it starts once the
first stopped cleanly (at once: the row is gone), and after a `kill -9` once
the first's claim ran out (never before). Two started at the same moment:
exactly one serves, the other is refused. A replica paused (SIGSTOP) past
its window is taken over, and once resumed forwards nothing.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.errors import ServerStartError
from fencegate.lab.cluster.gateway import GatewayProcess
from gateway.config import STALE_BEATS
from tests.gateway.conftest import create_database
from tests.waiting import eventually_sync

UPSTREAM = "http://127.0.0.1:9/store"  # never reached: these tests send no fenced request
HEARTBEAT = 1.0  # seconds; long enough that a loaded machine never lets a live claim run out (5 s)
KILLED_HEARTBEAT = 2.0  # the killed replica's: its claim runs out a WINDOW after its last beat
WINDOW = STALE_BEATS * KILLED_HEARTBEAT
START_DEADLINE = 30.0
REFUSED = re.compile(
    r"^fencegate serve: another gateway with --upstream-ordering trust-path runs on this database: instance "
    r"(?P<instance>[0-9a-f]{32}) \(.+ pid (?P<pid>\d+)\), last heartbeat (?P<ago>\d+\.\d) s ago; .+"
)
_LISTENING = re.compile(r"listening on (https?://\S+)")


@pytest.fixture(params=["sqlite", "postgresql"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    """The storage flags of the replicas: one SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return ["--data-dir", str(tmp_path / "shared")]
    cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
    return ["--storage", await create_database(cluster.postgres_dsn)]


def trust_path(storage: list[str], heartbeat: float = HEARTBEAT) -> list[str]:
    return [*storage, "--upstream", UPSTREAM, "--upstream-ordering", "trust-path",
            "--upstream-heartbeat", str(heartbeat)]  # fmt: skip


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[GatewayProcess]]:
    procs: list[GatewayProcess] = []
    yield procs
    for proc in procs:
        proc.stop()


def start(procs: list[GatewayProcess], log: Path, args: list[str]) -> GatewayProcess:
    proc = GatewayProcess(log, *args)
    proc.start()
    procs.append(proc)
    return proc


def serve(args: list[str]) -> subprocess.CompletedProcess[str]:
    """One `fencegate serve` that is expected to be refused: its exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", "fencegate.cli", "serve", "--port", "0", *args],
        capture_output=True, text=True, timeout=START_DEADLINE, check=False,
    )  # fmt: skip


def assert_refused_by(
    done: subprocess.CompletedProcess[str], holder: GatewayProcess, *, heartbeat: float = HEARTBEAT
) -> None:
    """Exit 2, and the one line on stderr names the running replica (its pid) and its last beat."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # refused before anything else was logged
    found = REFUSED.match(lines[0])
    assert found is not None, lines[0]
    assert holder.proc is not None
    assert int(found["pid"]) == holder.proc.pid
    assert float(found["ago"]) <= STALE_BEATS * heartbeat
    assert "Traceback" not in done.stderr


async def ready(url: str) -> dict[str, object]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/readyz") as resp:
        assert resp.status == 200, await resp.text()
        body: dict[str, object] = await resp.json()
        return body


async def test_a_second_replica_is_refused_while_the_first_runs_and_starts_after_a_clean_stop(
    storage: list[str], started: list[GatewayProcess], tmp_path: Path
) -> None:
    first = start(started, tmp_path / "first.log", trust_path(storage))
    assert_refused_by(serve(trust_path(storage)), first)
    assert (await ready(first.url))["upstream_ordering"] == "trust-path"  # the first serves on
    first.stop()  # a clean stop deletes its row: the next starts without waiting for a staleness
    second = start(started, tmp_path / "second.log", trust_path(storage))
    assert (await ready(second.url))["status"] == "ready"


async def test_a_killed_replica_blocks_the_next_only_until_its_claim_runs_out(
    storage: list[str], started: list[GatewayProcess], tmp_path: Path
) -> None:
    # A window long enough that the refusal right after the kill cannot race the claim running out.
    first = start(started, tmp_path / "first.log", trust_path(storage, heartbeat=KILLED_HEARTBEAT))
    first.kill9()
    killed_at = time.monotonic()
    done = serve(trust_path(storage))
    assert time.monotonic() - killed_at < WINDOW - KILLED_HEARTBEAT, "too slow to see the claim fresh"
    assert_refused_by(done, first, heartbeat=KILLED_HEARTBEAT)
    late = GatewayProcess(tmp_path / "late.log", *trust_path(storage))

    refusals: list[str] = []

    def starts() -> bool:
        try:
            late.start()
        except ServerStartError as exc:  # refused while the claim still held: checked below
            refusals.append(str(exc))
            return False
        return True

    eventually_sync(starts, within=WINDOW + START_DEADLINE, what="a start once the killed claim ran out")
    started.append(late)
    assert all("exited 2" in refusal for refusal in refusals), refusals
    # its last beat was at most one period before the kill, and its claim ran a whole window from there
    assert time.monotonic() - killed_at >= WINDOW - KILLED_HEARTBEAT
    assert (await ready(late.url))["status"] == "ready"


async def test_a_replica_paused_past_its_window_is_taken_over_and_forwards_nothing_when_it_resumes(
    storage: list[str], started: list[GatewayProcess], tmp_path: Path
) -> None:
    paused = start(started, tmp_path / "paused.log", trust_path(storage, heartbeat=0.5))
    assert paused.proc is not None
    os.kill(paused.proc.pid, signal.SIGSTOP)
    try:
        successor = GatewayProcess(tmp_path / "successor.log", *trust_path(storage))

        def starts() -> bool:
            try:
                successor.start()
            except ServerStartError:  # refused while the paused one's claim still held
                return False
            return True

        eventually_sync(starts, within=START_DEADLINE, what="a successor once the paused claim ran out")
        started.append(successor)
    finally:
        os.kill(paused.proc.pid, signal.SIGCONT)
    async with aiohttp.ClientSession() as session:
        put = f"{paused.url}/v1/objects/k"
        async with session.put(put, data=b"late", headers={"Fencing-Token": "9"}) as resp:
            assert (resp.status, (await resp.json())["error"]) == (503, "replica_claim_lapsed")
        async with session.get(f"{paused.url}/readyz") as resp:
            assert (resp.status, (await resp.json())["error"]) == (503, "replica_claim_lapsed")
        async with session.get(f"{successor.url}/v1/fences/k") as resp:
            assert (await resp.json())["highest"] == 0  # the paused replica moved no mark
    assert (await ready(successor.url))["upstream_ordering"] == "trust-path"


def race(storage: list[str], logs: list[Path]) -> list[int | None]:
    """Start one replica per log at the same moment; once one serves and the other exited, the exit
    codes (None: serving); then stop the one serving, which must exit 0."""
    procs = []
    for log in logs:
        with log.open("wb") as out:
            argv = [sys.executable, "-m", "fencegate.cli", "serve", "--port", "0", *trust_path(storage)]
            procs.append(subprocess.Popen(argv, stdout=out, stderr=out, start_new_session=True))
    try:

        def settled() -> bool:
            exited = any(p.poll() is not None for p in procs)
            return exited and any(_LISTENING.search(log.read_text()) for log in logs)

        eventually_sync(settled, within=START_DEADLINE, what="one replica serving and one exited")
        return [p.poll() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                assert p.wait(timeout=START_DEADLINE) == 0
            p.wait(timeout=START_DEADLINE)


def test_two_replicas_started_at_once_exactly_one_runs(storage: list[str], tmp_path: Path) -> None:
    for round_ in range(3):
        logs = [tmp_path / f"r{round_}-{i}.log" for i in (1, 2)]
        codes = race(storage, logs)
        assert sorted(codes, key=str) == [2, None], (codes, [log.read_text() for log in logs])
        [refused] = [log for log, code in zip(logs, codes, strict=True) if code == 2]
        assert REFUSED.match(refused.read_text().strip()), refused.read_text()
