"""The audit trail stays verifiable whatever clients send, and `audit verify` on a live database is exact.

Whatever a client puts in a request (quotes, JSON, non-ASCII, oversized or control-laden names and
tokens), every refusal reaches the trail and `fencegate audit verify` finds it sound; verify reads one
snapshot, so an append while it reads is neither reported as tampering nor blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from fencegate.cli import main
from fencegate.lab.cluster import LocalCluster
from storage import open_engine
from storage.verify import verify_audit
from tests.databases import fresh_database, migrated_store
from tests.gateway.conftest import MakeClient, create_database
from tests.gateway.test_headers import send
from tests.waiting import eventually

RELOAD_DEADLINE = 10.0


async def test_what_a_client_puts_in_a_request_cannot_break_the_trail(
    make_client: MakeClient,
    tmp_path: Path,
    postgres_cluster: LocalCluster,
    unique: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Quotes, JSON, brackets and non-ASCII in a key's name, and refused requests carrying oversized,
    non-ASCII or control-laden names and tokens, on PostgreSQL (whose columns have lengths): every
    refusal is a 4xx, every one reaches the trail, and `fencegate audit verify` finds it sound."""
    dsn = await create_database(postgres_cluster.postgres_dsn)
    name = 'q"],[1,"x\\ ключ {"a": 1}'
    path = tmp_path / "keys.json"
    assert main(["keys", "--file", str(path), "add", name, "--prefix", ""]) == 0
    auth = [("Authorization", f"Bearer {capsys.readouterr().out.strip()}")]
    client = await make_client(api_keys=path, storage=dsn, group_commit=0)
    assert (await send(client, "PUT", f"/v1/objects/{unique}", [*auth, ("Fencing-Token", "5")], b"v"))[
        0
    ] == 201

    hostile: list[tuple[str, str, list[tuple[str, str]]]] = [
        ("PUT", f"/v1/objects/{unique}", [*auth, ("Fencing-Token", "4")]),  # stale
        ("PUT", f"/v1/objects/{unique}", [*auth, ("Fencing-Token", "9" * 4000)]),
        ("PUT", f"/v1/objects/{unique}", [*auth, ("Fencing-Token", "5"), ("Fencing-Resource", "r" * 7000)]),
        ("PUT", f"/v1/objects/{unique}", [*auth, ("Fencing-Token", "5"), ("Fencing-Resource", 'a"],"b')]),
        ("PUT", "/v1/objects/" + "k" * 3000, [*auth, ("Fencing-Token", "5")]),
        ("PUT", "/v1/objects/%E2%80%A8%0A%00x", [*auth, ("Fencing-Token", "5")]),
        ("GET", "/v1/fences/" + "%22%5D%2C%5B" * 50, auth),
        ("PUT", f"/v1/objects/{unique}", [("Authorization", 'Bearer \\"],[0'), ("Fencing-Token", "5")]),
    ]
    for method, target, headers in hostile:
        status, body = await send(client, method, target, headers, b"x")
        assert 400 <= status < 500, (target[:60], status, body)

    verify = ["audit", "verify", "--storage", dsn, "--json"]

    async def every_refusal_in_a_sound_trail() -> bool:
        assert await asyncio.to_thread(main, verify) == 0  # its own event loop, off this one
        report = json.loads(capsys.readouterr().out)
        assert report["ok"], report["violations"]
        return int(report["entries"]) - int(report["outcomes"].get("accepted", 0)) == len(hostile)

    await eventually(every_refusal_in_a_sound_trail, within=RELOAD_DEADLINE, what="every refusal verified")


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_verify_reads_one_snapshot_while_a_gateway_appends(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """An operator runs `audit verify` on a live database. A write committed after verify read the
    entries and before it read the head row made PostgreSQL's verify report "entries were removed
    from the tail" (a false alarm of tampering); on SQLite verify held the write lock (BEGIN
    IMMEDIATE) for its whole read, so the gateway's writes waited on it, up to the busy timeout."""
    async with contextlib.AsyncExitStack() as stack:
        if engine == "postgresql":
            cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
            url = await stack.enter_async_context(fresh_database(cluster, "snapshot"))
        else:
            url = f"sqlite:///{tmp_path / 'fencegate.db'}"
        store = await stack.enter_async_context(migrated_store(url))
        await store.put("k", b"1", resource="r", token=1)
        verifying = open_engine(url)
        stack.push_async_callback(verifying.dispose)
        written: list[str] = []

        def append_from_another_process() -> None:  # its own loop, engine and connection
            async def put() -> None:
                async with migrated_store(url) as other:
                    await other.put("k", b"2", resource="r", token=2)

            try:
                asyncio.run(put())
                written.append("committed")
            except Exception as exc:  # noqa: BLE001 - the failure is what the test reports
                written.append(f"{type(exc).__name__}: {exc}")

        def between_the_entries_and_the_head_row(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if "fencegate_audit_head" in statement and not written:
                writer = threading.Thread(target=append_from_another_process)
                writer.start()
                writer.join()

        event.listen(verifying.sync_engine, "before_cursor_execute", between_the_entries_and_the_head_row)
        report = await verify_audit(verifying)
    assert written == ["committed"]  # not blocked by the verify
    assert report.ok, report.violations
    assert (report.rows, report.stored_head, report.chain.last_id) == (1, report.chain, 1)  # as of its start
