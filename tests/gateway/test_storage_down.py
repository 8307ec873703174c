"""Invariant 4: a lost or unknown storage outcome is answered 503, never 2xx.

A private PostgreSQL (never the shared one) is stopped, or paused past the
deadlines, under a running gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from gateway import Settings, create_app
from storage import StorageUnavailable
from tests.gateway.conftest import AppClient, MakeClient
from tests.waiting import eventually

RECOVERY_DEADLINE = 30.0
PG = "postgres-0"


def _process_tree(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    tree = [root]
    for pid in tree:
        tree.extend(child for child, parent in parents.items() if parent == pid)
    return tree


@contextlib.contextmanager
def hung(cluster: LocalCluster) -> Iterator[None]:
    """SIGSTOP the postmaster and every backend (each backend runs in a session of its own,
    so stopping the postmaster's process group leaves open connections answering)."""
    pid = cluster.nodes[PG].pid
    assert pid is not None
    stopped = _process_tree(pid)
    for each in stopped:
        os.kill(each, signal.SIGSTOP)
    try:
        yield
    finally:
        for each in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(each, signal.SIGCONT)


async def wait_ready(client: AppClient) -> None:
    async def ready() -> bool:
        return (await client.get("/readyz")).status == 200

    await eventually(ready, within=RECOVERY_DEADLINE, what="readiness after PostgreSQL returned")


async def test_invariant_4_postgres_stopped_is_503_nothing_written_and_recovers(
    make_client: MakeClient,
    cluster_factory: Callable[[ClusterSpec], LocalCluster],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The log tells the operator both ends of the outage: the batches that failed and the first
    commit after them, the probes that failed and the first that passed."""
    caplog.set_level("INFO", logger="storage")
    caplog.set_level("INFO", logger="gateway.readiness")
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, postgres=True))
    client = await make_client(storage=cluster.postgres_dsn, storage_timeout=2.0)
    assert (await client.put("/v1/objects/doc", data=b"before", headers={"Fencing-Token": "5"})).status == 201

    await asyncio.to_thread(cluster.stop, PG)
    for method, token in (("PUT", "9"), ("DELETE", "9"), ("GET", "9"), ("GET", None)):
        headers = {"Fencing-Token": token} if token else {}
        resp = await client.request(method, "/v1/objects/doc", data=b"during", headers=headers)
        body = await resp.json()
        assert (resp.status, body["error"]) == (503, "storage_unavailable"), (method, body)
    ready = await client.get("/readyz")
    assert (ready.status, (await ready.json())["error"]) == (503, "storage_unavailable")
    # a probe says what is down at WARNING; the failed requests above carry the traceback at ERROR
    probes = [r for r in caplog.records if '"path": "/readyz"' in r.getMessage()]
    assert [(r.levelname, r.exc_info) for r in probes] == [("WARNING", None)]
    assert any(r.levelname == "ERROR" and r.exc_info for r in caplog.records if r.name == "gateway.refusals")

    await asyncio.to_thread(cluster.restart, PG)
    await wait_ready(client)
    read = await client.get("/v1/objects/doc")
    assert (await read.read(), read.headers["Fencing-Token"]) == (b"before", "5")
    assert (await (await client.get("/v1/fences/doc")).json())["highest"] == 5
    after = await client.put("/v1/objects/doc", data=b"after", headers={"Fencing-Token": "6"})
    assert (after.status, (await after.json())["version"]) == (200, 2)
    failed = [r for r in caplog.records if r.getMessage().startswith("a group commit of")]
    assert {r.levelname for r in failed} == {"ERROR"}
    back = [r for r in caplog.records if "group commit works again" in r.getMessage()]
    assert [(r.levelname, r.created > failed[-1].created) for r in back] == [("INFO", True)]
    ready_again = [r.levelname for r in caplog.records if r.getMessage().startswith("ready again after")]
    assert ready_again == ["INFO"]  # once, however many probes passed since


async def test_invariant_4_postgres_hung_past_the_deadline_is_503_never_2xx(
    make_client: MakeClient, cluster_factory: Callable[[ClusterSpec], LocalCluster]
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, postgres=True))
    client = await make_client(storage=cluster.postgres_dsn, storage_timeout=1.0, request_timeout=3.0)
    assert (await client.put("/v1/objects/hung", data=b"v1", headers={"Fencing-Token": "1"})).status == 201

    with hung(cluster):
        resp = await client.put("/v1/objects/hung", data=b"v2", headers={"Fencing-Token": "2"})
        assert resp.status == 503
        assert (await resp.json())["error"] in ("storage_unavailable", "request_timeout")
    await wait_ready(client)
    # The outcome was unknown: either state is allowed, but never a half of one.
    read = await client.get("/v1/objects/hung")
    state = (await read.read(), read.headers["Fencing-Token"], read.headers["Object-Version"])
    assert state in ((b"v1", "1", "1"), (b"v2", "2", "2"))


async def test_a_hung_postgres_is_answered_503_within_the_storage_timeout(
    make_client: MakeClient, cluster_factory: Callable[[ClusterSpec], LocalCluster]
) -> None:
    """Each request to a hung server is answered once its storage deadline passes, not after the
    driver's goodbye to the dead connection (SQLAlchemy waits up to 2 s for it) nor after a reconnect
    that waits out a connect timeout longer than `--storage-timeout` (5 s)."""
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, postgres=True))
    client = await make_client(storage=cluster.postgres_dsn, storage_timeout=0.5, request_timeout=30.0)
    assert (await client.put("/v1/objects/hung", data=b"v1", headers={"Fencing-Token": "1"})).status == 201
    assert (await client.get("/v1/objects/hung")).status == 200

    with hung(cluster):
        # the kept connections first, then the fresh ones that replace them
        for token in ("2", "3"):
            async with asyncio.timeout(1.5):
                put, get = await asyncio.gather(
                    client.put("/v1/objects/hung", data=b"v2", headers={"Fencing-Token": token}),
                    client.get("/v1/objects/hung"),
                )
            assert (put.status, get.status) == (503, 503)
    await wait_ready(client)

    async def served() -> bool:
        resp = await client.put("/v1/objects/hung", data=b"v3", headers={"Fencing-Token": "4"})
        return resp.status in (200, 201)

    await eventually(served, within=RECOVERY_DEADLINE, what="a PUT served after PostgreSQL resumed")
    assert (await client.get("/v1/objects/hung")).status == 200


async def test_a_store_that_cannot_be_migrated_stops_the_start_and_the_log_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The error names the fix and no driver text; the log keeps the driver's reason for the operator."""
    garbage = tmp_path / "not-a-database.db"
    garbage.write_bytes(b"this file is not a SQLite database" * 100)
    runner = web.AppRunner(create_app(Settings(data_dir=tmp_path, storage=f"sqlite:///{garbage}")))
    with caplog.at_level("ERROR", logger="gateway"), pytest.raises(StorageUnavailable) as caught:
        await runner.setup()
    await runner.cleanup()
    assert "not a database" not in str(caught.value)
    logged = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("not ready" in line and "file is not a database" in line for line in logged), logged
