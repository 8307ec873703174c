"""Two `fencegate serve` replicas on one PostgreSQL append to one audit chain at once, and it does not
fork; each logs the chain's head at shutdown, and `fencegate audit verify --head` takes what it logged."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncEngine

from fencegate.cli import main
from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.gateway import GatewayProcess
from gateway.audit_cli import progress_printer
from storage import SqlObjectStore, migrate, open_engine
from storage.models import AuditEntry
from tests.databases import fresh_database

WRITES = 300
_HEAD = re.compile(r"audit chain head at shutdown ([0-9a-f]{64}@[0-9]+)")


async def _load(urls: list[str]) -> int:
    """Concurrent fenced writes over both replicas, stale ones among them; the number answered 2xx."""
    async with aiohttp.ClientSession() as session:

        async def put(n: int) -> int:
            url = f"{urls[n % 2]}/v1/objects/chain/{n % 30}"
            headers = {"Fencing-Token": str(n), "Fencing-Resource": f"chain-{n % 3}"}
            async with session.put(url, data=b"x", headers=headers) as resp:
                assert resp.status in (200, 201, 409), await resp.text()
                return 1 if resp.status < 300 else 0

        return sum(await asyncio.gather(*(put(n) for n in range(1, WRITES + 1))))


async def test_two_replicas_append_one_chain_and_log_its_head_at_shutdown(
    postgres_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with fresh_database(postgres_cluster, "chain") as url:
        modes = (["--group-commit", "64"], ["--group-commit", "0"])  # one batching, one per request
        procs = [
            GatewayProcess(tmp_path / f"gw{i}.log", "--storage", url, *mode) for i, mode in enumerate(modes)
        ]
        try:
            urls = [proc.start() for proc in procs]
            accepted = await _load(urls)
        finally:
            for proc in procs:
                proc.stop()
        assert accepted > 0
        assert await asyncio.to_thread(main, ["audit", "verify", "--storage", url]) == 0
        out = capsys.readouterr().out
        assert "ok: the chain holds" in out
        logged = [_HEAD.search(proc.log_path.read_text()) for proc in procs]
        heads = [found.group(1) for found in logged if found is not None]
        assert len(heads) == 2, "each replica logs the head at shutdown"
        last = max(heads, key=lambda head: int(head.split("@")[1]))
        assert f"chain head: {last}" in out  # the last replica to stop saw the final head
        # The tail cut and the head row left alone: found; the exported head names the cut entry too.
        engine = open_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.execute(delete(AuditEntry).where(AuditEntry.id == int(last.split("@")[1])))
        finally:
            await engine.dispose()
        args = ["audit", "verify", "--storage", url, "--head", last]
        assert await asyncio.to_thread(main, args) == 1
        out = capsys.readouterr().out
        assert "entries were removed from the tail" in out
        assert "is not in the trail: the tail was truncated" in out


@pytest.mark.parametrize("head", ["abc@12", "0" * 64, f"{'0' * 64}@-1", f"{'g' * 64}@3"])
def test_a_malformed_exported_head_is_a_usage_error(
    head: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert main(["audit", "verify", "--storage", url, "--head", head]) == 2
    err = capsys.readouterr().err
    assert "give HASH@ID as the gateway logged it" in err
    assert not (tmp_path / "none.db").exists()  # nothing was opened, let alone changed


def test_verify_of_a_sqlite_file_that_is_not_there_is_a_usage_error_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "fencegat.db"
    assert main(["audit", "verify", "--storage", f"sqlite:///{typo}"]) == 2
    assert "there is no SQLite database at" in capsys.readouterr().err
    assert not typo.exists()


def test_a_long_verify_prints_a_progress_line_per_hundred_thousand_entries(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show = progress_printer()
    for checked in (10_000, 99_999, 100_000, 150_000, 210_000, 210_000):  # as pages come in
        show(checked)
    assert capsys.readouterr().err.splitlines() == [
        "fencegate audit verify: 100000 entries checked",
        "fencegate audit verify: 210000 entries checked",
    ]


def test_verify_json_states_the_same_report_for_machines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'json.db'}"

    async def write_then(change: Callable[[AsyncEngine], Awaitable[None]] | None = None) -> None:
        engine = open_engine(url)
        try:
            if change is None:
                await migrate(engine)
                for token in (1, 2, 3):
                    await SqlObjectStore(engine).put("j/a", b"x", resource="j", token=token)
            else:
                await change(engine)
        finally:
            await engine.dispose()

    async def remove_entry_2(engine: AsyncEngine) -> None:
        async with engine.begin() as conn:
            await conn.execute(delete(AuditEntry).where(AuditEntry.id == 2))

    asyncio.run(write_then())
    assert main(["audit", "verify", "--storage", url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["ok"], report["entries"], report["outcomes"], report["violations"]) == (
        True, 3, {"accepted": 3}, []
    )  # fmt: skip
    assert main(["audit", "verify", "--storage", url]) == 0
    assert f"chain head: {report['head']} " in capsys.readouterr().out  # the same head as the text says

    asyncio.run(write_then(remove_entry_2))
    assert main(["audit", "verify", "--storage", url, "--json"]) == 1
    broken = json.loads(capsys.readouterr().out)
    assert (broken["ok"], broken["first_break"]) == (False, 3)
    assert broken["violations"]
