"""Two conditional http replicas, one delayed path: what the upstream itself finally holds.

Two `fencegate serve --upstream-ordering conditional` processes on one real
PostgreSQL in front of one real HTTP store (`tests.gateway.etag_upstream`,
a process of its own); replica A reaches it through the lab's `DelayProxy`,
held again and again while requests are in flight. Clients race fresh and
stale tokens over a few keys, deletes mixed in, through either replica. A
watcher reads the store directly the whole time (each body names its
token); at the end each key's bytes are read directly too. Out of token
order means the token a key held went down between two reads; durable means
the highest token answered 2xx for a key is what the key finally holds (its
bytes, or a tombstone for a delete).

The control runs the same workload through replicas whose writes carry no
preconditions (`tests.gateway.unconditional_serve`): it must be caught.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import re
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.faults.proxy import DelayProxy
from gateway.conditional import TOMBSTONE_PREFIX
from tests.gateway.conftest import create_database
from tests.gateway.etag_upstream import started
from tests.gateway.test_s3_acceptance import Outcome, Replica, Watch

KEYS = tuple(f"k{i}" for i in range(4))  # as test_s3_acceptance's Watch expects
OPS = 400
WORKERS = 12
DELETES = 0.12
LATE = 0.25
HOLD, GAP = 0.4, 0.3
UPSTREAM_TIMEOUT = 10.0  # well past HOLD: held writes are answered, not timed out
_BODY = re.compile(rb"^k\d token (\d+)$")


@pytest.fixture
async def database(postgres_cluster: LocalCluster) -> str:
    return await create_database(postgres_cluster.postgres_dsn)


@contextlib.asynccontextmanager
async def _replicas(
    module: str, upstream: str, dsn: str, proxy: DelayProxy, tmp_path: Path
) -> AsyncIterator[tuple[Replica, Replica]]:
    common = [
        "--storage",
        dsn,
        "--upstream-ordering",
        "conditional",
        "--upstream-timeout",
        str(UPSTREAM_TIMEOUT),
    ]
    a = Replica(tmp_path / "a.log", module, [*common, "--upstream", f"http://127.0.0.1:{proxy.port}/o"], {})
    b = Replica(tmp_path / "b.log", module, [*common, "--upstream", f"{upstream}/o"], {})
    try:
        await a.start()
        await b.start()
        yield a, b
    finally:
        await a.stop()
        await b.stop()


async def _held(session: aiohttp.ClientSession, upstream: str, key: str) -> bytes | None:
    async with session.get(f"{upstream}/o/{key}") as answer:
        return None if answer.status == 404 else await answer.read()


async def _race(a: Replica, b: Replica, proxy: DelayProxy, upstream: str) -> tuple[list[str], float]:
    rng = random.Random(35)
    tokens, sent = itertools.count(1), itertools.count()
    outcomes: list[Outcome] = []
    watch = Watch()
    done = asyncio.Event()

    async def client(session: aiohttp.ClientSession) -> None:
        while next(sent) < OPS:
            key, replica = rng.choice(KEYS), rng.choice((a, b))
            method = "DELETE" if rng.random() < DELETES else "PUT"
            token = next(tokens)
            if rng.random() < LATE:  # a holder that stalls after drawing its token: it races as a stale one
                await asyncio.sleep(rng.uniform(0.0, 0.05))
            body = f"{key} token {token}".encode()
            data = body if method == "PUT" else None
            url = f"{replica.url}/v1/objects/{key}"
            async with session.request(
                method, url, data=data, headers={"Fencing-Token": str(token)}
            ) as answer:
                await answer.read()
                outcomes.append(Outcome(key, method, token, body, answer.status))

    async def path_faults() -> None:
        while not done.is_set():
            proxy.hold(HOLD)
            await asyncio.sleep(HOLD + GAP)
        proxy.hold(0)

    async with aiohttp.ClientSession() as session:

        async def watcher() -> None:
            while not done.is_set():
                for key in KEYS:
                    found = _BODY.match(await _held(session, upstream, key) or b"")
                    if found:  # tombstones name no token: only the writes' bodies are ordered
                        watch.seen[key].append(int(found.group(1)))

        faults, watching = asyncio.create_task(path_faults()), asyncio.create_task(watcher())
        await asyncio.gather(*(client(session) for _ in range(WORKERS)))
        done.set()
        await asyncio.gather(faults, watching)
        async with session.get(f"{a.url}/metrics") as scraped:
            metrics = await scraped.text()
        final = {key: await _held(session, upstream, key) for key in KEYS}

    assert len(outcomes) == OPS
    answered = {outcome.status for outcome in outcomes}
    # 503: upstream_contended (every conditional send refused) or the database busy; nothing applied
    assert answered <= {200, 201, 404, 409, 503}, f"unexpected answers: {answered}"
    accepted = [o for o in outcomes if o.status in (200, 201)]
    assert len(accepted) > OPS // 10, "too few writes accepted for the race to mean anything"
    violations = [f"applied out of token order at the upstream: {d}" for d in watch.decreases()]
    for key in KEYS:
        last = max((o for o in accepted if o.key == key), key=lambda o: o.token, default=None)
        holds = final[key]
        if last is None:
            continue
        if last.method == "PUT" and holds != last.body:
            violations.append(
                f"{key}: token {last.token}'s PUT was answered {last.status}, the upstream holds {holds!r}"
            )
        elif last.method == "DELETE" and holds is not None and not holds.startswith(TOMBSTONE_PREFIX):
            violations.append(
                f"{key}: token {last.token}'s delete was answered 2xx, the upstream holds {holds!r}"
            )
    refused = re.search(r"^fencegate_upstream_precondition_failures_total (\S+)$", metrics, re.MULTILINE)
    return violations, float(refused.group(1)) if refused else 0.0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "safe"), [("fencegate.cli", True), ("tests.gateway.unconditional_serve", False)],
    ids=["conditional", "control-without-preconditions"],
)  # fmt: skip
async def test_racing_writes_through_two_replicas_and_a_delayed_path_land_in_token_order(
    module: str, safe: bool, database: str, tmp_path: Path
) -> None:
    async with started() as upstream:
        where = urlsplit(upstream)
        assert where.hostname is not None
        assert where.port is not None
        async with (
            DelayProxy(where.hostname, where.port) as proxy,
            _replicas(module, upstream, database, proxy, tmp_path) as (a, b),
        ):
            violations, refused_at_the_upstream = await _race(a, b, proxy, upstream)
    if safe:
        assert violations == []
        assert refused_at_the_upstream > 0, "no held write reached the upstream late: the race tested nothing"
    else:
        assert violations, "the control without preconditions found no violation: the check sees nothing"
