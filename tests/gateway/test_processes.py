"""Real `fencegate serve` processes: crashes (`kill -9`) and two replicas on one PostgreSQL.

Invariant 3 (the mark never decreases) across a crash and between replicas,
and invariant 1 (accepted tokens never decrease in commit order) with two
gateways committing to one database at once.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.gateway import GatewayProcess
from tests.waiting import eventually

LOAD_DEADLINE = 60.0
Start = Callable[..., GatewayProcess]


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[Start]:
    started: list[GatewayProcess] = []

    def start(*args: str, name: str = "gw") -> GatewayProcess:
        proc = GatewayProcess(tmp_path / f"{name}.log", *args)
        proc.start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


@pytest.mark.parametrize("group_commit", ["256", "0"], ids=["group-commit", "one-transaction-per-request"])
async def test_kill_9_during_writes_loses_no_acknowledged_write_and_no_mark(
    start_gateway: Start, tmp_path: Path, group_commit: str
) -> None:
    gateway = start_gateway("--data-dir", str(tmp_path / "data"), "--group-commit", group_commit)
    acked: dict[str, tuple[str, int]] = {}  # key -> (resource, token) of every 2xx write
    dead = asyncio.Event()

    async def writer(session: aiohttp.ClientSession, client: int) -> None:
        resource = f"r{client}"
        for token in itertools.count(1):
            key = f"w{client}/{token}"
            try:
                async with session.put(
                    f"{gateway.url}/v1/objects/{key}",
                    data=key.encode(),
                    headers={"Fencing-Token": str(token), "Fencing-Resource": resource},
                ) as resp:
                    if resp.status in (200, 201):
                        acked[key] = (resource, token)
                    else:
                        assert resp.status >= 500, await resp.text()
            except (TimeoutError, aiohttp.ClientError):
                if dead.is_set():
                    return
                raise

    async with aiohttp.ClientSession() as session:
        writers = [asyncio.create_task(writer(session, c)) for c in range(8)]

        def progressed() -> bool:
            assert not any(w.done() for w in writers), [w.exception() for w in writers if w.done()]
            return len(acked) >= 150

        await eventually(progressed, within=LOAD_DEADLINE, what="150 acknowledged writes")
        dead.set()
        await asyncio.to_thread(gateway.kill9)
        await asyncio.wait_for(asyncio.gather(*writers), LOAD_DEADLINE)
        snapshot = dict(acked)

        url = await asyncio.to_thread(gateway.start)
        for key in snapshot:
            async with session.get(f"{url}/v1/objects/{key}") as resp:
                assert (resp.status, await resp.read()) == (200, key.encode()), key
        for client in range(8):
            highest = max((t for r, t in snapshot.values() if r == f"r{client}"), default=0)
            async with session.get(f"{url}/v1/fences/r{client}") as resp:
                assert (await resp.json())["highest"] >= highest


@pytest.mark.parametrize("server", ["postgres_cluster", "postgres_tls_cluster"], ids=["plaintext", "tls"])
async def test_two_replicas_on_one_postgres_never_accept_below_a_committed_token(
    start_gateway: Start, request: pytest.FixtureRequest, server: str
) -> None:
    """Also with the replicas' storage over TLS with a client certificate (sslmode=verify-full)."""
    cluster: LocalCluster = request.getfixturevalue(server)
    dsn = cluster.postgres_dsn
    replicas = [start_gateway("--storage", dsn, name=f"replica{i}") for i in range(2)]
    key = f"shared-{uuid.uuid4().hex[:8]}"
    tokens = itertools.count(1)
    rng = random.Random(7)
    # (started, finished, token, version or None): version orders commits on the one row
    history: list[tuple[float, float, int, int | None]] = []

    async def client(session: aiohttp.ClientSession) -> None:
        for _ in range(40):
            token = next(tokens)
            if rng.random() < 0.25:  # a paused holder wakes up with an older token
                token = max(1, token - rng.randint(1, 10))
            url = rng.choice(replicas).url
            started = time.monotonic()
            async with session.put(
                f"{url}/v1/objects/{key}", data=str(token).encode(), headers={"Fencing-Token": str(token)}
            ) as resp:
                body = await resp.json()
                assert resp.status in (200, 201, 409), body
                version = body["version"] if resp.status < 300 else None
            history.append((started, time.monotonic(), token, version))

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(8)))
        marks = []
        for replica in replicas:
            async with session.get(f"{replica.url}/v1/fences/{key}") as resp:
                marks.append((await resp.json())["highest"])

    accepted = [h for h in history if h[3] is not None]
    assert len(accepted) >= 20
    assert len(accepted) < len(history)
    by_commit = [token for *_, token, _ in sorted(accepted, key=lambda h: h[3] or 0)]
    assert by_commit == sorted(by_commit), "a replica accepted a token below an earlier-committed one"
    for started, _, token, _ in accepted:
        committed_before = [t for _, finished, t, _ in accepted if finished < started]
        assert token >= max(committed_before, default=0)
    assert marks == [max(t for *_, t, _ in accepted)] * 2


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
async def test_serve_fences_on_the_event_loop_it_was_given(
    start_gateway: Start, tmp_path: Path, event_loop: str
) -> None:
    gateway = start_gateway("--data-dir", str(tmp_path / "data"), "--event-loop", event_loop)
    assert f"(event loop: {event_loop})" in gateway.log_path.read_text()
    async with aiohttp.ClientSession() as session:
        url = f"{gateway.url}/v1/objects/k"
        async with session.put(url, data=b"new", headers={"Fencing-Token": "2"}) as fresh:
            assert fresh.status == 201
        async with session.put(url, data=b"old", headers={"Fencing-Token": "1"}) as stale:
            assert stale.status == 409
            assert (await stale.json())["highest"] == 2


async def test_a_client_that_hangs_up_mid_body_is_its_own_fault_not_a_server_error(
    start_gateway: Start, tmp_path: Path
) -> None:
    """A served gateway (aiohttp's test server cancels such a handler instead) counts and logs it as the
    client's 400: no ERROR and no traceback, no 500 to page anyone over; nothing is written."""
    gateway = start_gateway("--data-dir", str(tmp_path / "data"))
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    for _ in range(3):
        _, writer = await asyncio.open_connection(host, int(port))
        head = "PUT /v1/objects/hangup HTTP/1.1\r\nHost: t\r\nFencing-Token: 7\r\nContent-Length: 1000"
        writer.write(f"{head}\r\n\r\nabc".encode())
        await writer.drain()
        writer.close()
    async with aiohttp.ClientSession() as session:

        async def metrics() -> str:
            async with session.get(f"{gateway.url}/metrics") as answer:
                return await answer.text()

        async def counted() -> bool:
            return 'route="/v1/objects/{key}",status="400"} 3.0' in await metrics()

        await eventually(counted, what="three PUTs counted as 400")
        assert 'status="500"' not in await metrics()
        async with session.get(f"{gateway.url}/v1/fences/hangup") as fence:
            assert await fence.json() == {"resource": "hangup", "highest": 0}
    log = gateway.log_path.read_text()
    assert "connection closed before the whole body arrived" in log
    assert " ERROR " not in log
    assert "Traceback" not in log
