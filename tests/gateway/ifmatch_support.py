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
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from fencegate.lab.faults.proxy import DelayProxy
from gateway.app_keys import AppKeys
from storage import open_engine
from storage.models import AuditEntry
from storage.records import ACCEPTED
from tests.gateway.conftest import AppClient
from tests.waiting import eventually

HOLD = 30.0  # seconds A's path holds its write: released by the schedule long before


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
