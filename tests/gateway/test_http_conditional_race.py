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

The race itself is `tests.gateway.race_support`'s; this file reads the
upstream and judges what it holds. The control runs the same workload
through replicas whose writes carry no preconditions
(`fencegate.lab.unconditional_serve`): it must be caught.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.faults.proxy import DelayProxy
from gateway.transport import TOMBSTONE_PREFIX
from tests.gateway.conftest import create_database
from tests.gateway.etag_upstream import started
from tests.gateway.race_support import KEYS, SAFE_OR_CONTROL, UPSTREAM_TIMEOUT, Replica, race, replica_pair

OPS = 400
_BODY = re.compile(rb"^k\d token (\d+)$")


@pytest.fixture
async def database(postgres_cluster: LocalCluster) -> str:
    return await create_database(postgres_cluster.postgres_dsn)


def _replicas(
    module: str, upstream: str, dsn: str, proxy: DelayProxy, tmp_path: Path
) -> contextlib.AbstractAsyncContextManager[tuple[Replica, Replica]]:
    common = [
        "--storage",
        dsn,
        "--upstream-ordering",
        "conditional",
        "--upstream-timeout",
        str(UPSTREAM_TIMEOUT),
    ]
    a_args = [*common, "--upstream", f"http://127.0.0.1:{proxy.port}/o"]
    b_args = [*common, "--upstream", f"{upstream}/o"]
    return replica_pair(module, tmp_path, a_args, b_args, {})


async def _held(session: aiohttp.ClientSession, upstream: str, key: str) -> bytes | None:
    async with session.get(f"{upstream}/o/{key}") as answer:
        return None if answer.status == 404 else await answer.read()


async def _race(a: Replica, b: Replica, proxy: DelayProxy, upstream: str) -> tuple[list[str], float]:
    async with aiohttp.ClientSession() as session:

        async def token_at(key: str) -> int | None:
            found = _BODY.match(await _held(session, upstream, key) or b"")
            # tombstones name no token: only the writes' bodies are ordered
            return int(found.group(1)) if found else None

        raced = await race(session, a, b, proxy, ops=OPS, token_at=token_at)
        final = {key: await _held(session, upstream, key) for key in KEYS}

    # 503: upstream_contended (every conditional send refused) or the database busy; nothing applied
    violations, lasts = raced.checked(answers={200, 201, 404, 409, 503}, where="the upstream")
    for key, last in lasts.items():
        holds = final[key]
        if last.method == "PUT" and holds != last.body:
            violations.append(
                f"{key}: token {last.token}'s PUT was answered {last.status}, the upstream holds {holds!r}"
            )
        elif last.method == "DELETE" and holds is not None and not holds.startswith(TOMBSTONE_PREFIX):
            violations.append(
                f"{key}: token {last.token}'s delete was answered 2xx, the upstream holds {holds!r}"
            )
    return violations, raced.refused()


@pytest.mark.slow
@SAFE_OR_CONTROL
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
