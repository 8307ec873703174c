"""The lost update of fenced read-modify-write in proxy mode, as schedules both proxy modes' tests run.

`increments_schedule` is the model's `proxy-increments` trail on real
processes: replica A accepts a write (token 5, read from version v0) whose
path to the store is held; the newer holder (token 6) reads v0 through
replica B; A's write lands; then B writes what it computed from v0. Without
the client's `If-Match` B's write passes (the gateway's re-read finds a
lower token and sends again) and A's increment is lost; with it, B's write
is 412 and its retry, read afresh, keeps both.

`increments` is many such clients at once: each read-modify-write is a
fenced GET then a PUT with `If-Match` on the ETag read, a 412 is read again
under the same lease, a 409 takes a new lease (a fresh token).

The late cases hold A's write on its own connection of the proxy past A's
`--upstream-timeout` (504: outcome unknown) and then let it through:
`overtaken` has a newer holder write on the same ETag first, `late_increment`
lets nothing in between. How the test learns that the store decided the
released write is the store's own (`release`): SeaweedFS answers on the held
connection; the http store loses that answer with the connection the gateway
closed, and keeps a record instead.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from fencegate.lab.faults.proxy import DelayProxy
from gateway.app_keys import AppKeys
from gateway.conditional import ConditionalStore
from gateway.transport import Transport
from storage import open_engine
from storage.models import AuditEntry
from storage.records import ACCEPTED
from tests.gateway.conftest import AppClient
from tests.waiting import eventually

HOLD = 30.0  # seconds A's path holds its write: released by the test long before
TIMEOUT = 2.0  # the late cases: seconds A waits for the store (its --upstream-timeout)
_APPLIED = re.compile(r"^fencegate_upstream_round_trips_count (\S+)$", re.MULTILINE)


class Schedule(NamedTuple):
    a_status: int  # A's held write
    b_status: int  # the newer holder's write, computed from the version it read before A's landed
    final: bytes  # what the key then holds


async def _accepted(engine: AsyncEngine, key: str, token: int) -> bool:
    """Whether the gateway's fence let the PUT through (its audit entry commits with the mark)."""
    query = select(AuditEntry.id).where(
        AuditEntry.key == key,
        AuditEntry.method == "PUT",
        AuditEntry.token == token,
        AuditEntry.outcome == ACCEPTED,
    )
    async with engine.connect() as conn:
        return (await conn.execute(query)).first() is not None


async def increments_schedule(
    a: AppClient, b: AppClient, proxy: DelayProxy, key: str, *, if_match: bool
) -> Schedule:
    """The schedule of the module docstring; A's app reaches the store through `proxy`."""
    path = f"/v1/objects/{key}"
    assert (await b.put(path, data=b"0", headers={"Fencing-Token": "4"})).status == 201
    a_read = await a.get(path, headers={"Fencing-Token": "5"})
    a_headers = {"Fencing-Token": "5"} | ({"If-Match": a_read.headers["ETag"]} if if_match else {})
    proxy.hold(HOLD)
    a_write = asyncio.ensure_future(
        a.put(path, data=b"%d" % (int(await a_read.read()) + 1), headers=a_headers)
    )
    engine = open_engine(a.app[AppKeys.settings].storage_url)
    try:
        await eventually(lambda: _accepted(engine, key, 5), what="A's write accepted, under way to the store")
    finally:
        await engine.dispose()
    b_read = await b.get(path, headers={"Fencing-Token": "6"})
    assert b_read.status == 200
    b_value = int(await b_read.read())
    assert b_value == 0  # A's write is still held
    proxy.hold(0)
    a_status = (await a_write).status
    b_headers = {"Fencing-Token": "6"} | ({"If-Match": b_read.headers["ETag"]} if if_match else {})
    b_write = await b.put(path, data=b"%d" % (b_value + 1), headers=b_headers)
    final = await (await b.get(path)).read()
    return Schedule(a_status, b_write.status, final)


class Tally(NamedTuple):
    acknowledged: int  # increments answered 2xx
    final: int  # what the counter finally holds
    preconditions: int  # writes answered 412 (read again)
    leases: int  # leases taken (a 409 takes a new one)


async def increments(
    replicas: Sequence[AppClient], key: str, *, clients: int, each: int, proxy: DelayProxy
) -> Tally:
    """`clients` leased clients over `replicas` each acknowledge `each` increments of `key`; A's path
    (`proxy`) is held again and again for a few ms while they run."""
    path = f"/v1/objects/{key}"
    tokens = itertools.count(1)
    assert (
        await replicas[0].put(path, data=b"0", headers={"Fencing-Token": str(next(tokens))})
    ).status == 201
    acknowledged = preconditions = leases = 0
    running = True

    async def hold_again_and_again() -> None:
        while running:
            proxy.hold(random.uniform(0.0, 0.02))
            await asyncio.sleep(0.01)

    async def client(n: int) -> None:
        nonlocal acknowledged, preconditions, leases
        token, done, turn = next(tokens), 0, n
        while done < each:
            gateway = replicas[turn % len(replicas)]
            turn += 1
            read = await gateway.get(path, headers={"Fencing-Token": str(token)})
            if read.status == 409:
                token, leases = next(tokens), leases + 1
                continue
            assert read.status == 200, await read.text()
            value = int(await read.read())
            headers = {"Fencing-Token": str(token), "If-Match": read.headers["ETag"]}
            wrote = await gateway.put(path, data=b"%d" % (value + 1), headers=headers)
            if wrote.status == 200:
                acknowledged, done = acknowledged + 1, done + 1
            elif wrote.status == 412:
                preconditions += 1
            elif wrote.status == 409:
                token, leases = next(tokens), leases + 1
            else:
                raise AssertionError(f"{wrote.status}: {await wrote.text()}")

    holder = asyncio.ensure_future(hold_again_and_again())
    try:
        await asyncio.gather(*(client(n) for n in range(clients)))
    finally:
        running = False
        await holder
        proxy.hold(0)
    final = int(await (await replicas[1].get(path)).read())
    return Tally(acknowledged, final, preconditions, leases)


class Late(NamedTuple):
    """A write answered 504 and still held on its own connection of the proxy, as A sent it."""

    connection: int
    key: str
    data: bytes
    options: Mapping[str, Any]  # content_type, metadata, match: the client's ETag


def transport_of(replica: AppClient) -> Transport:
    store = replica.app[AppKeys.store]
    assert isinstance(store, ConditionalStore)
    return store.transport


async def answered_504(
    a: AppClient, proxy: DelayProxy, monkeypatch: pytest.MonkeyPatch, path: str, data: bytes,
    headers: Mapping[str, str],
) -> Late:  # fmt: skip
    """A's PUT held past A's timeout (504); its connection stays held, new ones pass at once."""
    transport = transport_of(a)
    put_if, sent = transport.put_if, []

    async def recording(key: str, data: bytes, **options: Any) -> str:
        sent.append((key, data, options))
        return await put_if(key, data, **options)

    monkeypatch.setattr(transport, "put_if", recording)
    await proxy.drop()  # the pool's idle connections are cut: the write opens a connection of its own
    proxy.hold(HOLD)
    late = await a.put(path, data=data, headers=headers)
    assert (late.status, (await late.json())["error"]) == (504, "upstream_timeout")
    connection = proxy.connections - 1
    proxy.hold(HOLD, connection=connection)
    proxy.hold(1e-6)
    monkeypatch.setattr(transport, "put_if", put_if)
    assert len(sent) == 1, sent
    key, body, options = sent[0]
    assert options["match"] is not None  # sent on the client's ETag
    return Late(connection, key, body, options)


async def release(proxy: DelayProxy, late: Late, progress: Callable[[], int], what: str) -> None:
    """Let the held write reach the store, and wait until `progress()` grows: the store's sign that
    it decided the write (module docstring)."""
    before = progress()
    proxy.hold(0, connection=late.connection)
    await eventually(lambda: progress() > before, within=10.0, what=what)


async def applied(replica: AppClient) -> int:
    """Writes the store accepted from `replica` since it started."""
    found = _APPLIED.search(await (await replica.get("/metrics")).text())
    assert found is not None, "no fencegate_upstream_round_trips_count in /metrics"
    return int(float(found.group(1)))


async def overtaken(
    a: AppClient, b: AppClient, proxy: DelayProxy, monkeypatch: pytest.MonkeyPatch, path: str
) -> tuple[Late, dict[str, str]]:
    """Token 5 read `path` and wrote on its ETag through A: 504, held. Token 6 read the same version
    through B and wrote on the same ETag: 200. The held write, and token 5's headers."""
    assert (await a.put(path, data=b"v4", headers={"Fencing-Token": "4"})).status == 201
    read = await a.get(path, headers={"Fencing-Token": "5"})
    stale = {"Fencing-Token": "5", "If-Match": read.headers["ETag"]}
    late = await answered_504(a, proxy, monkeypatch, path, b"v5-stale", stale)
    newer = await b.get(path, headers={"Fencing-Token": "6"})
    assert (await newer.read(), newer.headers["ETag"]) == (b"v4", read.headers["ETag"])  # 5's is held
    wrote = await b.put(path, data=b"v6", headers={"Fencing-Token": "6", "If-Match": newer.headers["ETag"]})
    assert wrote.status == 200, await wrote.text()
    return late, stale


async def stale_everywhere(
    replicas: Sequence[AppClient], path: str, late: Late, headers: Mapping[str, str]
) -> None:
    """The overtaken write's retry is 409 `stale_token` (highest 6) on each of `replicas`."""
    for replica in replicas:
        retry = await replica.put(path, data=late.data, headers=headers)
        body = await retry.json()
        assert (retry.status, body["error"], body.get("highest")) == (409, "stale_token", 6), body


async def late_increment(
    a: AppClient, proxy: DelayProxy, monkeypatch: pytest.MonkeyPatch, path: str, extra: Mapping[str, str]
) -> tuple[Late, dict[str, str]]:
    """`path` holds 0 (token 4); token 5 reads it and writes 1 on its ETag through A, with `extra`
    headers: 504, held. The held write, and its headers."""
    assert (await a.put(path, data=b"0", headers={"Fencing-Token": "4"})).status == 201
    read = await a.get(path, headers={"Fencing-Token": "5"})
    headers = {"Fencing-Token": "5", "If-Match": read.headers["ETag"], **extra}
    late = await answered_504(a, proxy, monkeypatch, path, b"%d" % (int(await read.read()) + 1), headers)
    return late, headers


async def retried(
    replica: AppClient, path: str, late: Late, headers: Mapping[str, str], *, times: int = 3
) -> list[tuple[int, bytes]]:
    """The late write sent again `times` as its client sent it: each answer's status and body."""
    answers = []
    for _ in range(times):
        retry = await replica.put(path, data=late.data, headers=headers)
        answers.append((retry.status, await retry.read()))
    return answers


async def increment_afresh(replica: AppClient, path: str, *, token: int) -> int:
    """A fenced read of `path`, then its value + 1 written on the ETag read (200); the value read."""
    read = await replica.get(path, headers={"Fencing-Token": str(token)})
    value = int(await read.read())
    wrote = await replica.put(
        path,
        data=b"%d" % (value + 1),
        headers={"Fencing-Token": str(token), "If-Match": read.headers["ETag"]},
    )
    assert wrote.status == 200, await wrote.text()
    return value
