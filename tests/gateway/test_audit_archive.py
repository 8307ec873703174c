"""`fencegate audit archive` and `audit verify --archive`: old entries move to checked files, the chain
still verifies across them, and a run killed at any step loses nothing and is finished by a rerun.

On real SQLite files and a PostgreSQL database of its own: the trail is
written by the store (accepted writes and refusals), archived by the command
line, and checked by `audit verify` from the archives plus what the database
finally holds. The crash tests stop a real `fencegate audit archive` process
at each named step (`storage.archive.PAUSE_AT`) and `kill -9` it there.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from fencegate.cli import main
from gateway.durations import Duration
from gateway.storage_tls import open_storage
from storage import Refused, SqlObjectStore, migrate, verify_audit
from storage.archive import PAUSE_AT, STEPS, archive_audit, archive_into
from storage.models import AuditEntry
from storage.sqlite.group_commit import GroupCommitStore
from tests.databases import ENGINES, engine_url
from tests.gateway.conftest import MakeClient
from tests.waiting import eventually, eventually_sync

ENTRIES = 300


async def _fill(url: str, first: int, count: int) -> None:
    engine = open_storage(url)
    try:
        await migrate(engine)
        store = SqlObjectStore(engine)
        for n in range(first, first + count):
            if n % 10 == 0:  # a refusal in the trail too
                refused = Refused(
                    datetime.now(UTC), "key:a", "PUT", f"k{n % 3}", f"r{n % 3}", 1, n, 409, "stale_token"
                )
                await store.record_refusals([refused])
            else:
                await store.put(f"k{n % 3}", b"v%d" % n, resource=f"r{n % 3}", token=n)
    finally:
        await engine.dispose()


def fill(url: str, first: int = 1, count: int = ENTRIES) -> None:
    asyncio.run(_fill(url, first, count))


async def _ids(url: str) -> tuple[int | None, int]:
    engine = open_storage(url)
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(select(func.min(AuditEntry.id), func.count()))).one()
            return row[0], row[1]
    finally:
        await engine.dispose()


def ids(url: str) -> tuple[int | None, int]:
    """The live trail's first id and its count of entries."""
    return asyncio.run(_ids(url))


def verify(url: str, *archives: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    argv = ["audit", "verify", "--storage", url, "--json"]
    for archive in archives:
        argv += ["--archive", str(archive)]
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(params=ENGINES)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with engine_url(request, tmp_path, "archive") as found:
        yield found


def test_archives_and_the_live_trail_verify_as_one_chain(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(url)
    first, second = tmp_path / "a1.jsonl.gz", tmp_path / "a2.jsonl.gz"
    assert main(["audit", "archive", "--storage", url, "--before", "101", "--to", str(first)]) == 0
    assert "archived entries 1..100" in capsys.readouterr().out
    fill(url, ENTRIES + 1, 50)
    assert main(["audit", "archive", "--storage", url, "--before", "301", "--to", str(second)]) == 0
    capsys.readouterr()
    assert ids(url) == (301, 50)
    code, report = verify(url, second, first, capsys=capsys)  # in any order
    assert (code, report["entries"], report["violations"]) == (0, ENTRIES + 50, [])
    assert report["outcomes"] == {"accepted": 315, "stale_token": 35}
    code, report = verify(url, second, capsys=capsys)  # the first archive left out: it starts after 100
    assert code == 0
    assert report["archived_before"] == 100

    tampered = tmp_path / "tampered.jsonl.gz"
    lines = gzip.decompress(first.read_bytes()).splitlines()
    entry = json.loads(lines[50])
    entry["token"] += 1_000
    lines[50] = json.dumps(entry).encode()
    tampered.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    code, report = verify(url, tampered, second, capsys=capsys)
    assert code == 1
    assert report["first_break"] == entry["id"]


def test_a_target_that_cannot_be_written_stops_the_run_before_anything_is_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    fill(url, count=20)
    (tmp_path / "a-file").write_text("")  # the tests run as root: a file, not a mode, stops the write
    for target in (tmp_path / "missing" / "a.gz", tmp_path / "a-file" / "a.gz"):
        assert main(["audit", "archive", "--storage", url, "--before", "15", "--to", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"fencegate audit archive: archive {target} cannot be written"), err
        assert "\n" not in err
        assert ids(url) == (1, 20)


@pytest.mark.parametrize("bad", ["0", "yesterday", "2026-13-01"])
def test_a_bad_cutoff_is_one_line_and_exit_2(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    fill(url, count=3)
    assert main(["audit", "archive", "--storage", url, "--before", bad, "--to", str(tmp_path / "a.gz")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fencegate audit archive: --before"), err
    assert ids(url) == (1, 3)


@pytest.mark.parametrize("step", STEPS)
def test_a_run_killed_at_each_step_loses_nothing_and_a_rerun_finishes(
    step: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    fill(url, count=ENTRIES)
    target, log = tmp_path / "a.jsonl.gz", tmp_path / "archive.log"
    argv = [sys.executable, "-m", "fencegate.cli", "audit", "archive", "--storage", url]
    argv += ["--before", "201", "--to", str(target), "--batch", "50"]  # `deleting`: 50 of 200 gone
    with log.open("wb") as err:
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, PAUSE_AT: step}
        )
        try:
            eventually_sync(lambda: f"paused at {step}" in log.read_text(), what=f"the pause at {step}")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    if step == "deleting":  # the first batch is gone, the rest still in the database
        assert ids(url) == (51, 250)
    archives = [target] if target.exists() else []
    code, report = verify(url, *archives, capsys=capsys)
    assert (code, report["entries"], report["violations"]) == (0, ENTRIES, []), report
    assert main(["audit", "archive", "--storage", url, "--before", "201", "--to", str(target)]) == 0
    capsys.readouterr()
    assert ids(url) == (201, 100)
    code, report = verify(url, target, capsys=capsys)
    assert (code, report["entries"], report["violations"]) == (0, ENTRIES, []), report


def test_the_batch_default_is_the_runs() -> None:
    from gateway.commands import audit
    from storage.archive import DELETE_BATCH

    parser = argparse.ArgumentParser()
    audit(parser)
    assert parser.parse_args(["archive", "--before", "1", "--to", "a"]).batch == DELETE_BATCH


async def test_serve_archives_on_a_schedule_and_the_archives_verify(
    make_client: MakeClient, tmp_path: Path
) -> None:
    archives = tmp_path / "archives"
    archives.mkdir()
    client = await make_client(audit_retention=Duration(1), audit_archive_dir=archives)
    for token in range(1, 21):
        resp = await client.put("/v1/objects/sched", data=b"v", headers={"Fencing-Token": str(token)})
        assert resp.status in (200, 201)
    url = f"sqlite:///{tmp_path / 'fencegate.db'}"

    async def archived() -> bool:
        first, _ = await _ids(url)
        return first is None or first > 20

    await eventually(archived, within=30.0, what="the scheduled archive of the first 20 entries")
    engine = open_storage(url)
    try:
        report = await verify_audit(engine, archives=sorted(archives.glob("audit-*.jsonl.gz")))
    finally:
        await engine.dispose()
    assert report.ok, report.violations
    assert report.rows >= 20


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--audit-retention=0s", "--audit-archive-dir", "{dir}"], "--audit-retention '0s' is not above zero"),
     (["--audit-retention=nan", "--audit-archive-dir", "{dir}"], "--audit-retention 'nan' is not a duration"),
     (["--audit-retention=-1d", "--audit-archive-dir", "{dir}"], "--audit-retention '-1d' is not a duration"),
     (["--audit-retention", "7d"], "give --audit-retention and --audit-archive-dir together"),
     (["--audit-retention", "7d", "--audit-archive-dir", "{dir}/none"], "is not a directory")],
)  # fmt: skip
def test_bad_retention_settings_are_one_line_and_exit_2(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--port", "0", "--data-dir", str(tmp_path)]
    assert main([*argv, *(flag.format(dir=tmp_path) for flag in flags)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err, err
    assert "\n" not in err


async def test_requests_are_answered_while_an_archive_is_being_written_and_read_back(
    make_client: MakeClient, tmp_path: Path
) -> None:
    """The archive's file work is off the loop: its worker thread waits, at its first page written and
    again at its first page read back, until a request has been answered meanwhile."""
    client = await make_client()

    async def put(key: str) -> None:
        resp = await client.put(f"/v1/objects/{key}", data=b"v", headers={"Fencing-Token": "1"})
        assert resp.status in (200, 201), await resp.text()

    await asyncio.gather(*(put(f"many/{n}") for n in range(ENTRIES)))
    archives = tmp_path / "archives"
    archives.mkdir()
    reached, answered, waited = threading.Event(), threading.Event(), []

    def hold(_count: int) -> None:  # in the worker thread: the loop must serve the PUT below meanwhile
        reached.set()
        waited.append(answered.wait(timeout=30.0))
        answered.clear()

    engine = open_storage(f"sqlite:///{tmp_path / 'fencegate.db'}")
    try:
        run = asyncio.create_task(
            archive_into(engine, archives, before_time=datetime.now(UTC), progress=hold)
        )
        for step in ("written", "read back"):
            await eventually(reached.is_set, within=30.0, what=f"the archive's first page {step}")
            reached.clear()
            await put(f"during/{step.replace(' ', '-')}")
            answered.set()
        result = await run
        report = await verify_audit(engine, archives=[result.archive.path] if result.archive else [])
    finally:
        await engine.dispose()
    assert waited == [True, True]
    assert result.archive is not None
    assert result.deleted == result.archive.last_id >= ENTRIES
    assert report.ok, report.violations


async def test_on_sqlite_the_deletes_ride_in_the_group_commits_and_the_chain_still_verifies(
    tmp_path: Path,
) -> None:
    """With fenced PUTs in flight: every archived entry is deleted, each batch inside one of the
    writer's transactions (a group commit per step), every PUT lands, and the archive and the live
    trail, the PUTs' entries too, verify as one chain."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    await _fill(url, 1, ENTRIES)
    engine = open_storage(url)
    store = GroupCommitStore(SqlObjectStore(engine), path=str(tmp_path / "store.db"))
    await store.start()
    steps: list[tuple[int, int]] = []  # per step: rows deleted, group commits so far

    async def chore(delete: str, params: Mapping[str, Any]) -> int:
        steps.append((await store.chore(delete, params), store.batches))
        return steps[-1][0]

    try:
        puts = [store.put(f"p/{n}", b"x", resource=f"p/{n}", token=1) for n in range(200)]
        target = tmp_path / "a.jsonl.gz"
        archiving = archive_audit(engine, to=target, before_id=ENTRIES + 1, batch=50, chore=chore)
        result, written = await asyncio.gather(archiving, asyncio.gather(*puts))
        assert result.deleted == ENTRIES
        assert [meta.version for meta in written] == [1] * len(puts)
        assert [deleted for deleted, _ in steps] == [50] * 6 + [0]  # oldest first, the last found none
        commits = [batches for _, batches in steps]
        assert commits == sorted(set(commits))  # each step in a group commit of its own
    finally:
        await store.aclose()
    try:
        report = await verify_audit(engine, archives=[target])
    finally:
        await engine.dispose()
    assert report.ok, report.violations
    assert report.rows == ENTRIES + len(puts)


def test_a_rerun_on_a_file_that_differs_from_the_database_deletes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "a.jsonl.gz"
    first, second = f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}"
    fill(first, count=100)
    fill(second, count=100)  # the same writes at other times: every hash differs
    assert main(["audit", "archive", "--storage", first, "--before", "51", "--to", str(target)]) == 0
    capsys.readouterr()
    assert main(["audit", "archive", "--storage", second, "--before", "51", "--to", str(target)]) != 0
    err = capsys.readouterr().err.strip()
    assert f"archive {target}: entry 1 differs from the database's; nothing deleted" in err, err
    assert ids(second) == (1, 100)
