"""A token source that is paused or never answers: the guard's reads give up at their own deadline.

Every write whose token is above the cached bound asks the source, so a burst
of them asks it many times at once. A source bounds one read, not the reads
queued behind it (ZooKeeper runs them on 16 threads, and retries a silent
member's handshake once per waiting read), so without a deadline of the
gateway's own these writes waited until the source came back, or until
`--request-timeout`. The deadlines here are far inside those waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import ClientResponse

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import open_token_source
from tests.gateway.conftest import AppClient, MakeClient
from tests.waiting import eventually

BURST = 64  # writes at once, each on a resource the guard has no bound for yet
ANSWERED = 15.0  # the guard's deadline (5 s) and a margin; the old code still had writes waiting here
LONG_REQUESTS = 60.0  # --request-timeout, far past the waits the old code ended only there or at resume


async def _status(resp: ClientResponse) -> tuple[int, str | None]:
    body = await resp.json()
    return resp.status, body.get("error")


def _burst(client: AppClient, prefix: str) -> list[asyncio.Task[tuple[int, str | None]]]:
    async def put(i: int) -> tuple[int, str | None]:
        resp = await client.put(f"/v1/objects/{prefix}-{i}", data=b"x", headers={"Fencing-Token": "1"})
        return await _status(resp)

    return [asyncio.create_task(put(i)) for i in range(BURST)]


async def _all_answered(
    tasks: list[asyncio.Task[tuple[int, str | None]]], what: str
) -> set[tuple[int, str | None]]:
    await eventually(lambda: all(t.done() for t in tasks), within=ANSWERED, what=what)
    return {t.result() for t in tasks}


class SilentMember:
    """A listener that accepts connections and never answers (a ZooKeeper member starting up)."""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(4096):
                pass
        except ConnectionError:
            pass
        finally:
            writer.close()


async def test_a_burst_of_writes_is_answered_503_while_zookeeper_is_paused_then_served_again(
    make_client: MakeClient, cluster_factory: Callable[[ClusterSpec], LocalCluster], unique: str
) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=0, zookeeper=True))
    client = await make_client(tokens=open_token_source(cluster.zookeeper_url), request_timeout=LONG_REQUESTS)
    await asyncio.to_thread(cluster.pause, "zookeeper-0")
    try:
        writes = _burst(client, unique)
        probe = asyncio.create_task(client.get("/readyz"))
        found = await _all_answered(writes, "every write of the burst answered while ZooKeeper is paused")
        await eventually(probe.done, within=ANSWERED, what="/readyz answered while ZooKeeper is paused")
        assert found == {(503, "token_source_unavailable")}
        assert (await _status(probe.result())) == (503, "token_source_unavailable")
    finally:
        await asyncio.to_thread(cluster.resume, "zookeeper-0")

    async def served() -> bool:
        resp = await client.put(f"/v1/objects/{unique}-back", data=b"x", headers={"Fencing-Token": "1"})
        return resp.status == 201

    await eventually(served, within=30.0, what="a token-checked write accepted after ZooKeeper resumed")
    assert (await client.get("/readyz")).status == 200


async def test_a_burst_of_writes_is_answered_503_when_the_zookeeper_member_never_answers(
    make_client: MakeClient, unique: str
) -> None:
    server = await asyncio.start_server(SilentMember().serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        source = open_token_source(f"zookeeper://127.0.0.1:{port}")
        client = await make_client(tokens=source, request_timeout=LONG_REQUESTS)
        writes = _burst(client, unique)
        found = await _all_answered(
            writes, "every write of the burst answered by a gateway on a silent member"
        )
        assert found == {(503, "token_source_unavailable")}
        assert await _status(await client.get("/readyz")) == (503, "token_source_unavailable")
    finally:
        server.close()
