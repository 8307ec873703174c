"""No internals in any response: every 5xx path, driven against real servers.

PostgreSQL stopped, hung past a deadline, killed with requests in flight,
a server-side statement timeout; the token source down; SQLite unable to
grow its file (the disk is full for the gateway); the upstream unreachable
in proxy mode; a bug. Each answer is 5xx with its code, the fixed message of
that code and a request id (body and `X-Request-Id`), and nothing else: no
SQL, no parameter (each request carries a marker that must not come back),
no path, no address, no driver name. The log holds the detail under that id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import resource
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiohttp import ClientResponse, web

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.cluster.gateway import GatewayProcess
from gateway import Settings, create_app
from gateway.app_keys import AppKeys
from gateway.middlewares import REQUEST_ID_HEADER, SERVER_ERROR_DETAILS, SERVER_ERROR_FIELDS
from lockclient import open_token_source
from tests.gateway.conftest import AppClient, MakeClient, create_database
from tests.waiting import eventually

PG = "postgres-0"
NEXT_RECORD = re.compile(r"^\d{4}-\d\d-\d\d ", re.MULTILINE)  # a log record's first line
DEADLINE = 30.0
# What a driver's message, a traceback or a DSN would put into a body.
LEAKS = re.compile(
    r"SELECT|INSERT|UPDATE|DELETE FROM|RETURNING|\[SQL|parameters|Traceback|File \"|asyncpg|sqlalchemy|"
    r"sqlite|OperationalError|InterfaceError|Errno|Connect call|127\.0\.0\.1|localhost|\.py\b|\.db\b|"
    r"/(?:tmp|work|root|home|usr|var|etc)/",
    re.IGNORECASE,
)


def assert_clean(status: int, raw: bytes, headers: Any, *, code: str, markers: tuple[str, ...] = ()) -> str:
    """The answer is the fixed 5xx of `code` and holds nothing else; its request id."""
    text = raw.decode()
    body = json.loads(text)
    assert status >= 500, body
    assert body["error"] == code, body
    assert body["detail"] == SERVER_ERROR_DETAILS[code]
    assert set(body) <= {"error", "detail", "request_id", *SERVER_ERROR_FIELDS}, body
    assert re.fullmatch(r"[0-9a-f]{16}", body["request_id"])
    assert headers[REQUEST_ID_HEADER] == body["request_id"]
    assert LEAKS.search(text) is None, text
    for marker in markers:
        assert marker not in text, (marker, text)
    return str(body["request_id"])


async def answer(resp: ClientResponse) -> tuple[int, bytes, Any]:
    return resp.status, await resp.read(), resp.headers


def logged(caplog: pytest.LogCaptureFixture, request_id: str, *details: str) -> None:
    """The log line carrying `request_id` also carries the detail the body left out."""
    lines = [r for r in caplog.records if request_id in r.getMessage()]
    assert lines, f"request {request_id} is not in the log"
    record = lines[0]
    told = record.getMessage()
    if record.exc_info:
        told += logging.Formatter().formatException(record.exc_info)
    for detail in details:
        assert detail in told, (detail, told[-2000:])


def requests(marker: str) -> list[tuple[str, str, dict[str, str], bytes | None]]:
    """One request on every route that reaches storage; each names `marker` (a bound parameter)."""
    fenced = {"Fencing-Token": "9", "Fencing-Resource": marker}
    return [
        ("PUT", f"/v1/objects/{marker}", fenced, marker.encode() * 3),
        ("GET", f"/v1/objects/{marker}", {}, None),
        ("GET", f"/v1/objects/{marker}", fenced, None),
        ("DELETE", f"/v1/objects/{marker}", fenced, None),
        ("GET", f"/v1/objects?prefix={marker}", {}, None),
        ("GET", f"/v1/fences/{marker}", {}, None),
    ]


@pytest.fixture
async def cluster(cluster_factory: Callable[[ClusterSpec], LocalCluster]) -> LocalCluster:
    """A PostgreSQL of this test's own: the test stops, pauses or kills it."""
    return await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, postgres=True))


async def test_postgres_stopped_hung_and_killed_mid_request_answer_only_code_message_and_id(
    make_client: MakeClient, cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = cluster.postgres_dsn
    # one gateway per deadline: the request's, the database command's, and one that outwaits both
    deadline = await make_client(storage=dsn, request_timeout=1.0, storage_timeout=20.0)
    command = await make_client(storage=dsn, request_timeout=20.0, storage_timeout=1.0)
    patient = await make_client(storage=dsn, request_timeout=60.0, storage_timeout=60.0)
    marker = f"m{uuid.uuid4().hex[:12]}"
    for client in (deadline, command, patient):  # every pool holds a connection
        assert (await client.get(f"/v1/fences/{marker}")).status == 200

    await asyncio.to_thread(cluster.pause, PG)
    try:
        for client, code in ((deadline, "request_timeout"), (command, "storage_unavailable")):
            method, path, headers, data = requests(marker)[0]
            status, raw, hdrs = await answer(await client.request(method, path, headers=headers, data=data))
            request_id = assert_clean(status, raw, hdrs, code=code, markers=(marker, dsn))
            logged(caplog, request_id, "Timeout")
        # with requests in flight on the patient gateway, PostgreSQL dies
        in_flight = [
            asyncio.ensure_future(patient.request(m, p, headers=h, data=d)) for m, p, h, d in requests(marker)
        ]
        drain = patient.app[AppKeys.drain]
        await eventually(
            lambda: drain.in_flight == len(in_flight), within=DEADLINE, what="requests in flight"
        )
    finally:
        await asyncio.to_thread(cluster.kill, PG)
    for done in asyncio.as_completed(in_flight):
        status, raw, hdrs = await answer(await done)
        request_id = assert_clean(status, raw, hdrs, code="storage_unavailable", markers=(marker, dsn))
        logged(caplog, request_id, "StorageUnavailable", "Traceback")

    await asyncio.to_thread(cluster.restart, PG)
    await eventually(lambda: _ready(patient), within=DEADLINE, what="readiness after the restart")
    await asyncio.to_thread(cluster.stop, PG)
    for method, path, headers, data in requests(marker):
        status, raw, hdrs = await answer(await patient.request(method, path, headers=headers, data=data))
        assert_clean(status, raw, hdrs, code="storage_unavailable", markers=(marker, dsn))
    status, raw, hdrs = await answer(await patient.get("/readyz"))
    assert_clean(status, raw, hdrs, code="storage_unavailable", markers=(dsn,))


async def _ready(client: AppClient) -> bool:
    return (await client.get("/readyz")).status == 200


async def test_statement_timeout_on_the_server_is_503_without_the_statement(
    make_client: MakeClient, postgres_cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = await create_database(postgres_cluster.postgres_dsn, statement_timeout="300ms")
    client = await make_client(storage=dsn)
    marker = f"m{uuid.uuid4().hex[:12]}"
    assert (
        await client.put(f"/v1/objects/{marker}", data=b"v", headers={"Fencing-Token": "1"})
    ).status == 201
    blocker = await asyncpg.connect(dsn)
    try:
        await blocker.execute("SET statement_timeout = 0")
        async with blocker.transaction():  # every statement of the gateway waits, then is cancelled
            await blocker.execute(
                "LOCK TABLE fencegate_fences, fencegate_objects, fencegate_audit IN ACCESS EXCLUSIVE MODE"
            )
            for method, path, headers, data in requests(marker):
                resp = await client.request(method, path, headers=headers, data=data)
                request_id = assert_clean(
                    *await answer(resp), code="storage_unavailable", markers=(marker, dsn)
                )
                logged(caplog, request_id, "statement timeout")
    finally:
        await blocker.close()
    read = await client.get(f"/v1/objects/{marker}")
    assert (read.status, await read.read()) == (200, b"v")  # nothing was written meanwhile


async def test_token_source_down_is_503_without_its_address_and_not_ready(
    make_client: MakeClient, cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    tokens = open_token_source(cluster.postgres_dsn)
    token = await tokens.next_token("r")
    client = await make_client(tokens=tokens)
    assert (await client.get("/readyz")).status == 200
    await asyncio.to_thread(cluster.stop, PG)

    status, raw, hdrs = await answer(await client.get("/readyz"))
    request_id = assert_clean(status, raw, hdrs, code="token_source_unavailable")
    logged(caplog, request_id, "token source")
    fenced = {"Fencing-Token": str(token + 1)}  # above the cached bound: the source must be asked
    status, raw, hdrs = await answer(await client.put("/v1/objects/r", data=b"x", headers=fenced))
    assert_clean(status, raw, hdrs, code="token_source_unavailable")
    assert (await (await client.get("/v1/fences/r")).json())["highest"] == 0  # nothing was written

    with caplog.at_level("WARNING", logger="gateway"):  # a gateway that starts now says so
        other = await make_client(tokens=open_token_source(cluster.postgres_dsn))
    assert "did not answer a read" in caplog.text
    assert (await other.get("/readyz")).status == 503

    await asyncio.to_thread(cluster.restart, PG)
    await eventually(lambda: _ready(client), within=DEADLINE, what="readiness once the source is back")
    assert (await client.put("/v1/objects/r", data=b"x", headers={"Fencing-Token": str(token)})).status == 201


def _put(url: str, key: str, data: bytes, token: int) -> tuple[int, bytes, Any]:
    request = urllib.request.Request(  # noqa: S310 - a loopback test server
        f"{url}/v1/objects/{key}", data=data, method="PUT", headers={"Fencing-Token": str(token)}
    )
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE) as resp:  # noqa: S310 - loopback
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read(), err.headers


@pytest.mark.parametrize("group_commit", ["256", "0"], ids=["group-commit", "transaction-per-request"])
def test_sqlite_that_cannot_grow_its_file_is_503_without_sql_or_path(
    tmp_path: Path, group_commit: str
) -> None:
    """RLIMIT_FSIZE on the gateway process: a write past it fails with EFBIG, as on a full disk."""
    data_dir = tmp_path / "data"
    gateway = GatewayProcess(tmp_path / "gw.log", "--data-dir", str(data_dir), "--group-commit", group_commit)
    url = gateway.start()
    try:
        assert _put(url, "small", b"x", 1)[0] == 201
        assert gateway.proc is not None
        pid, limit = gateway.proc.pid, 1 << 20  # the log stays far below it; a 4 MiB write goes past
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        marker = f"m{uuid.uuid4().hex[:12]}"
        try:
            status, raw, headers = _put(url, marker, marker.encode() * ((4 << 20) // len(marker)), 2)
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        request_id = assert_clean(
            status, raw, headers, code="storage_unavailable", markers=(marker, str(tmp_path))
        )
        log = gateway.log_path.read_text()
        record = log[log.index(request_id) :]
        record = record[: (found.start() if (found := NEXT_RECORD.search(record)) else None)]
        assert "disk" in record, record  # the driver's words, in the traceback logged under the id
        assert _put(url, marker, b"after", 3)[0] == 201  # and it recovers once the file may grow
    finally:
        gateway.stop()


async def test_upstream_unreachable_is_503_without_its_address(
    make_client: MakeClient, unused_tcp_port: int
) -> None:
    client = await make_client(
        upstream_ordering="trust-path", upstream=f"http://127.0.0.1:{unused_tcp_port}/store"
    )
    resp = await client.put("/v1/objects/u", data=b"x", headers={"Fencing-Token": "1"})
    assert_clean(*await answer(resp), code="upstream_unavailable", markers=(str(unused_tcp_port),))


async def test_a_bug_is_500_with_the_traceback_in_the_log_only(
    aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("SELECT secret FROM /var/lib/fencegate/x.db")

    app = create_app(Settings(data_dir=tmp_path))
    app.router.add_get("/broken", broken)  # a handler with a bug, behind the real middlewares
    client: AppClient = await aiohttp_client(app)
    status, raw, hdrs = await answer(await client.get("/broken"))
    request_id = assert_clean(status, raw, hdrs, code="internal_error")
    logged(caplog, request_id, "RuntimeError: SELECT secret FROM /var/lib/fencegate/x.db", "Traceback")
