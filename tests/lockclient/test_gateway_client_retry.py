"""`GatewayClient` resends a write whose outcome is unknown with the same `Idempotency-Key`, and
the gateway applies it once; an answer of the API is never resent.

Against a served gateway over a private PostgreSQL (stopped, then restarted), a
TCP relay that drops the connection after the gateway answered, and real Redis
masters.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from gateway import Settings, create_app
from lockclient import (
    GatewayClient,
    GatewayError,
    GatewayRetry,
    IdempotencyKeyReused,
    LockLost,
    NotFound,
    OutcomeUnknown,
    Redlock,
    ResourceMismatch,
    SQLiteTokens,
    StaleToken,
)
from lockclient.http_errors import BY_STATUS, error_for
from tests.gateway.test_storage_down import hung
from tests.waiting import eventually

PG = "postgres-0"
PATIENT = GatewayRetry(attempts=200, delay=0.05, max_delay=0.25, jitter=0.0)  # outlasts a restart


@dataclass
class Sends:
    """Every request a client session sent: (method, path, status or None, Idempotency-Key)."""

    seen: list[tuple[str, str, int | None, str | None]] = field(default_factory=list)

    def session(self) -> aiohttp.ClientSession:
        trace = aiohttp.TraceConfig()

        async def ended(_s: Any, _c: Any, params: aiohttp.TraceRequestEndParams) -> None:
            self._add(params.method, params.url, params.headers, params.response.status)

        async def failed(_s: Any, _c: Any, params: aiohttp.TraceRequestExceptionParams) -> None:
            self._add(params.method, params.url, params.headers, None)

        trace.on_request_end.append(ended)
        trace.on_request_exception.append(failed)
        return aiohttp.ClientSession(trace_configs=[trace])

    def _add(self, method: str, url: Any, headers: Any, status: int | None) -> None:
        self.seen.append((method, url.path, status, headers.get("Idempotency-Key")))

    def writes(self) -> list[tuple[str, str, int | None, str | None]]:
        return [sent for sent in self.seen if sent[0] in ("PUT", "DELETE")]


@contextlib.asynccontextmanager
async def traced(base_url: str, sends: Sends, retry: GatewayRetry | None) -> AsyncIterator[GatewayClient]:
    async with sends.session() as session, GatewayClient(base_url, session=session, retry=retry) as gateway:
        yield gateway


@pytest.fixture
async def locker(redis_cluster: LocalCluster, tmp_path: Path) -> AsyncIterator[Redlock[int]]:
    async with Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(tmp_path / "tokens.db")) as locker:
        yield locker


OverPostgres = Callable[..., Awaitable[tuple[LocalCluster, str]]]


@pytest.fixture
def over_postgres(
    aiohttp_client: Any, cluster_factory: Callable[[ClusterSpec], LocalCluster], tmp_path: Path
) -> OverPostgres:
    """`await over_postgres(**settings)`: a served gateway over a PostgreSQL of its own, which the
    test may stop or pause; that cluster and the gateway's URL."""

    async def start(**settings: Any) -> tuple[LocalCluster, str]:
        storage = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, postgres=True))
        overrides = {"storage": storage.postgres_dsn, "storage_timeout": 2.0, **settings}
        served = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw", **overrides)))
        return storage, str(served.server.make_url(""))

    return start


async def test_a_503_is_resent_with_the_same_key_and_applied_once_when_storage_returns(
    over_postgres: OverPostgres, locker: Redlock[int], resource: str
) -> None:
    storage, url = await over_postgres()
    key = f"{resource}/doc"
    sends = Sends()
    async with (
        traced(url, sends, PATIENT) as gateway,
        locker.lock(resource, ttl=60.0) as lease,
    ):
        before = await gateway.put(key, b"before", lease=lease)
        await asyncio.to_thread(storage.stop, PG)
        write = asyncio.create_task(gateway.put(key, b"during", lease=lease))
        await eventually(lambda: any(s[2] == 503 for s in sends.writes()[1:]), what="a 503 to the write")
        await asyncio.to_thread(storage.restart, PG)
        written = await write

        tried = sends.writes()[1:]
        assert {status for *_, status, _ in tried[:-1]} == {503}
        assert tried[-1][2] == 200
        assert len({once for *_, once in tried}) == 1
        assert tried[0][3] is not None
        assert before.version is not None
        assert written.version == before.version + 1  # applied once
        assert (await gateway.get(key)).data == b"during"


async def test_when_retries_run_out_the_error_carries_the_key_and_a_later_retry_applies_once(
    over_postgres: OverPostgres, locker: Redlock[int], resource: str
) -> None:
    storage, url = await over_postgres()
    key = f"{resource}/doc"
    sends = Sends()
    async with (
        traced(url, sends, GatewayRetry(attempts=2, delay=0.0)) as gateway,
        locker.lock(resource, ttl=60.0) as lease,
    ):
        await gateway.put(key, b"v1", lease=lease)
        await asyncio.to_thread(storage.stop, PG)
        with pytest.raises(OutcomeUnknown) as unknown:
            await gateway.put(key, b"v2", lease=lease)
        assert (unknown.value.status, unknown.value.code, unknown.value.attempts) == (
            503,
            "storage_unavailable",
            2,
        )
        once = unknown.value.idempotency_key
        assert once is not None
        assert once in str(unknown.value)
        assert [sent[3] for sent in sends.writes()[1:]] == [once, once]

        await asyncio.to_thread(storage.restart, PG)
        later = await _eventually_put(gateway, key, b"v2", lease, once)
        assert later.version == 2
        assert (await gateway.put(key, b"v2", lease=lease, idempotency_key=once)).version == 2  # replayed
        # hostile: the same key for another write is refused, not answered from the first
        with pytest.raises(IdempotencyKeyReused):
            await gateway.put(key, b"v3", lease=lease, idempotency_key=once)
        assert (await gateway.get(key)).data == b"v2"


async def _eventually_put(gateway: GatewayClient, key: str, data: bytes, lease: Any, once: str) -> Any:
    """The caller's own later retry, as often as the storage takes to come back."""
    for _ in range(200):
        with contextlib.suppress(OutcomeUnknown):
            return await gateway.put(key, data, lease=lease, idempotency_key=once)
    raise AssertionError("the storage did not come back")


class DroppingRelay:
    """A TCP relay to the gateway(s) that drops a connection once the gateway has answered, without
    passing the answer on (the write was applied, the client cannot know): the first `drops`
    connections, or every other one with `alternate`. Connections go to each target in turn."""

    def __init__(self, *targets: tuple[str, int], drops: int = 0, alternate: bool = False) -> None:
        self.targets = targets
        self.drops = drops
        self.alternate = alternate
        self.dropped = 0
        self.relayed = 0
        self.connections = 0
        self.used: set[tuple[str, int]] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = self.targets[self.connections % len(self.targets)]
        drop = self.connections % 2 == 0 if self.alternate else self.dropped < self.drops
        self.connections += 1
        self.used.add(target)
        up_reader, up_writer = await asyncio.open_connection(*target)
        self.dropped += drop
        self.relayed += not drop

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        if drop:
            up = asyncio.create_task(pipe(reader, up_writer))
            await up_reader.read(1)  # the gateway has answered: the write is committed
            up.cancel()
            for each in (writer, up_writer):
                each.transport.abort()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def test_a_dropped_connection_after_the_write_was_applied_is_resent_and_answered_once(
    aiohttp_client: Any, locker: Redlock[int], resource: str, tmp_path: Path
) -> None:
    served = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw")))
    relay = DroppingRelay(("127.0.0.1", served.server.port), drops=2)
    key = f"{resource}/doc"
    sends = Sends()
    url = await relay.start()
    try:
        async with (
            traced(url, sends, GatewayRetry(delay=0.0, jitter=0.0)) as gateway,
            GatewayClient(str(served.server.make_url(""))) as direct,
            locker.lock(resource, ttl=60.0) as lease,
        ):
            written = await gateway.put(key, b"once", lease=lease)
            tried = sends.writes()  # aiohttp may resend on a fresh connection itself: count at the relay
            assert (relay.dropped, relay.relayed) == (2, 1)
            assert tried[-1][2] == 201
            assert all(status is None for *_, status, _ in tried[:-1])
            assert len({once for *_, once in tried}) == 1
            # the first send created it; the third was answered from that write, not applied again
            assert (written.version, written.created) == (1, True)
            assert (await direct.get(key)).version == 1

            await relay.close()
            with pytest.raises(GatewayError) as down:  # a gateway that cannot be reached: nothing sent
                async with GatewayClient(url, retry=GatewayRetry(attempts=2, delay=0.0)) as gone:
                    await gone.put(key, b"never", lease=lease)
            assert not isinstance(down.value, OutcomeUnknown)
            assert down.value.code == "unreachable"
    finally:
        await relay.close()


async def test_an_answer_of_the_api_is_never_resent(
    aiohttp_client: Any, locker: Redlock[int], resource: str, tmp_path: Path
) -> None:
    served = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw")))
    key = f"{resource}/doc"
    sends = Sends()
    async with traced(str(served.server.make_url("")), sends, PATIENT) as gateway:
        async with locker.lock(resource, ttl=10.0) as old:
            pass
        async with locker.lock(resource, ttl=10.0) as new:
            await gateway.put(key, b"new", lease=new)
        sends.seen.clear()
        with pytest.raises(StaleToken):
            await gateway.put(key, b"old", token=old.token, resource=resource)
        with pytest.raises(ResourceMismatch):
            await gateway.delete(key, token=new.token)
        with pytest.raises(NotFound):
            await gateway.get(f"{resource}/missing")
        assert [status for *_, status, _ in sends.seen] == [409, 409, 404]  # each sent once
        # every write makes its own key: two equal calls are two writes, not one replayed
        async with locker.lock(resource, ttl=10.0) as lease:
            first = await gateway.put(key, b"same", lease=lease)
            second = await gateway.put(key, b"same", lease=lease)
        assert first.version is not None
        assert second.version == first.version + 1
        keys = [once for method, *_, once in sends.seen if method == "PUT"]
        assert None not in keys
        assert len(set(keys)) == len(keys)


async def test_with_retry_none_a_write_is_sent_once_without_a_key(
    aiohttp_client: Any, locker: Redlock[int], resource: str, tmp_path: Path
) -> None:
    served = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gw")))
    sends = Sends()
    async with (
        traced(str(served.server.make_url("")), sends, None) as gateway,
        locker.lock(resource, ttl=10.0) as lease,
    ):
        await gateway.put(f"{resource}/a", b"x", lease=lease)
        await gateway.put(f"{resource}/b", b"x", lease=lease, idempotency_key="mine")
    assert [once for *_, once in sends.writes()] == [None, "mine"]


def test_every_error_code_of_the_api_is_a_typed_error() -> None:
    """Each (status, code) row of docs/gateway.md's table raises a subclass, never a bare GatewayError."""
    table = (Path(__file__).parents[2] / "docs" / "gateway.md").read_text()
    rows = re.findall(r"^\| (\d{3}) \| (`[a-z_`, ]+`) \|", table, flags=re.M)
    codes = [(int(status), code) for status, codes in rows for code in re.findall(r"`([a-z_]+)`", codes)]
    assert len(codes) >= 20, codes
    fields = {"resource": "r", "token": 1, "highest": 2, "bound": 0, "key": "k", "object_resource": "o"}
    for status, code in codes:
        body = {"error": code, "detail": "d", **fields}
        error = error_for("PUT /v1/objects/k", status, {}, str(body).replace("'", '"').encode())
        assert type(error) is not GatewayError, (status, code)
        assert (error.status, error.code) == (status, code)
        assert isinstance(error, OutcomeUnknown) == (status >= 500 and status != 501), (status, code)
    assert set(BY_STATUS) <= {status for status, _ in codes}


async def test_a_write_answered_503_while_postgresql_hangs_is_applied_once_after_it_continues(
    over_postgres: OverPostgres, locker: Redlock[int], resource: str
) -> None:
    """SIGSTOPped past the deadlines, the first send's transaction may still commit when PostgreSQL
    continues: the resends under its key must then be answered from it, not applied again."""
    storage, url = await over_postgres(storage_timeout=1.0, request_timeout=3.0)
    key = f"{resource}/doc"
    sends = Sends()
    async with (
        traced(url, sends, PATIENT) as gateway,
        locker.lock(resource, ttl=120.0, auto_extend=True) as lease,
    ):
        before = await gateway.put(key, b"v1", lease=lease)
        with hung(storage):
            write = asyncio.create_task(gateway.put(key, b"v2", lease=lease))
            await eventually(
                lambda: any(s[2] == 503 for s in sends.writes()[1:]), within=60, what="a 503 to the write"
            )
        written = await write
        tried = sends.writes()[1:]
        assert 503 in {status for *_, status, _ in tried}
        assert len({once for *_, once in tried}) == 1
        assert before.version is not None
        assert written.version == before.version + 1  # once, whichever send it was
        fetched = await gateway.get(key)
        assert (fetched.data, fetched.version) == (b"v2", before.version + 1)


async def test_a_lease_lost_between_sends_stops_the_retries_with_the_outcome_unknown(
    over_postgres: OverPostgres, locker: Redlock[int], resource: str
) -> None:
    storage, url = await over_postgres()
    sends = Sends()
    async with traced(url, sends, PATIENT) as gateway:
        lease = await locker.acquire(resource, ttl=1.5)  # no watchdog: it runs out while the sends fail
        await asyncio.to_thread(storage.stop, PG)
        with pytest.raises(OutcomeUnknown) as unknown:
            await gateway.put(f"{resource}/doc", b"late", lease=lease)
        assert isinstance(unknown.value.__cause__, LockLost)
        assert unknown.value.idempotency_key is not None
        sent = len(sends.writes())
        assert 1 <= sent < PATIENT.attempts
        with pytest.raises(LockLost):  # and from now on nothing is sent
            await gateway.put(f"{resource}/doc", b"later", lease=lease)
        assert len(sends.writes()) == sent


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_concurrent_writers_whose_answers_are_dropped_are_applied_once_across_two_replicas(
    engine: str, aiohttp_client: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Every other connection is dropped after its gateway answered; connections alternate between
    two gateways on one database (PostgreSQL; SQLite has one gateway), so a resend often reaches the
    replica that did not apply it."""
    if engine == "postgresql":
        cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
        apps = [Settings(data_dir=tmp_path / f"gw{i}", storage=cluster.postgres_dsn) for i in (1, 2)]
    else:
        apps = [Settings(data_dir=tmp_path / "gw")]
    served = [await aiohttp_client(create_app(settings)) for settings in apps]
    relay = DroppingRelay(*[("127.0.0.1", each.server.port) for each in served], alternate=True)
    prefix = f"gc-{uuid.uuid4().hex[:10]}"
    writers = 12
    url = await relay.start()
    try:
        async with GatewayClient(str(served[-1].server.make_url(""))) as direct:

            async def write(n: int) -> Any:
                async with GatewayClient(url, retry=GatewayRetry(attempts=10, delay=0.0, jitter=0.0)) as own:
                    return await own.put(f"{prefix}/{n}", b"%d" % n, token=5)

            answers = await asyncio.gather(*(write(n) for n in range(writers)))
            assert relay.dropped >= 1
            assert len(relay.used) == len(served)
            for n, answer in enumerate(answers):
                fetched = await direct.get(f"{prefix}/{n}")
                assert (answer.version, fetched.version, fetched.data) == (1, 1, b"%d" % n)
    finally:
        await relay.close()
