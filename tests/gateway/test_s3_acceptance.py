"""The proxy's promise on real SeaweedFS: two replicas, one delayed path, what SeaweedFS itself finally holds.

Two `fencegate serve` processes on one real PostgreSQL in front of one real
SeaweedFS; replica A reaches the store through the lab's `DelayProxy`, held
again and again while requests are in flight. Clients race fresh and stale
tokens over a few keys, deletes mixed in, through either replica. A watcher
reads the store directly with aiobotocore the whole time, and at the end
the test reads what each key finally holds. Out of token order at the store
means the token the store holds for a key went down between two reads (a
write applied after one with a higher token); durable means the highest
token answered 2xx for a key is what the key finally holds, bytes and all
(or a higher one whose write was answered 504, outcome unknown).

The race itself is `tests.gateway.race_support`'s; this file reads the
store (a HEAD for the watch, the objects at the end) and judges what it
holds. The control runs the same workload through replicas whose writes
carry no preconditions (`fencegate.lab.unconditional_serve`): it must be
caught.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import aiohttp
import pytest
from botocore.exceptions import ClientError

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.faults.proxy import DelayProxy
from gateway.transport import TOMBSTONE
from tests.gateway.conftest import create_database
from tests.gateway.race_support import KEYS, SAFE_OR_CONTROL, UPSTREAM_TIMEOUT, Replica, race, replica_pair
from tests.gateway.s3_support import aws_environment, delayed_path, direct_client, fresh_prefix, held

OPS = 1000  # requests sent, over both replicas


@pytest.fixture
async def database(postgres_cluster: LocalCluster) -> str:
    return await create_database(postgres_cluster.postgres_dsn)


def _replicas(
    module: str, store: dict[str, str], dsn: str, prefix: str, proxy: DelayProxy, tmp_path: Path
) -> contextlib.AbstractAsyncContextManager[tuple[Replica, Replica]]:
    common = ["--storage", dsn, "--upstream", f"s3://{store['bucket']}/{prefix}",
              "--upstream-timeout", str(UPSTREAM_TIMEOUT)]  # fmt: skip
    a_args = [*common, "--upstream-endpoint", f"http://127.0.0.1:{proxy.port}"]
    b_args = [*common, "--upstream-endpoint", store["endpoint"]]
    return replica_pair(module, tmp_path, a_args, b_args, aws_environment(store, tmp_path))


async def _race(
    a: Replica, b: Replica, proxy: DelayProxy, store: dict[str, str], prefix: str
) -> tuple[list[str], float]:
    """Run the workload: every violation found, as text (empty: none), and how many of replica A's
    writes the store refused 412."""
    async with direct_client(store) as s3:

        async def token_at(key: str) -> int | None:
            try:
                found = await s3.head_object(Bucket=store["bucket"], Key=prefix + key)
            except ClientError:  # nothing there yet
                return None
            return int(found["Metadata"]["fencing-token"])  # tombstones' included

        async with aiohttp.ClientSession() as session:
            raced = await race(session, a, b, proxy, ops=OPS, token_at=token_at)
        final = {key: await held(s3, store["bucket"], prefix + key) for key in KEYS}

    # 504: a write SeaweedFS left unanswered past the timeout (outcome unknown; rare, never with a 2xx)
    violations, lasts = raced.checked(answers={200, 201, 404, 409, 504}, where="the store")
    unknown = {(o.key, o.token): o for o in raced.outcomes if o.status == 504}
    for key, last in lasts.items():
        holds = final[key]
        if holds is not None and holds.token > last.token and (key, holds.token) in unknown:
            last = unknown[key, holds.token]  # a write answered 504 that did land: allowed, and it is last
        if holds is None or holds.token != last.token:
            violations.append(
                f"{key}: token {last.token} was answered {last.status}, the store ends with "
                f"{None if holds is None else holds.token}"
            )
        elif last.method == "PUT" and holds.data != last.body:
            violations.append(f"{key}: the store's bytes are not those of token {last.token}'s 2xx")
        elif last.method == "DELETE" and holds.metadata.get(TOMBSTONE) != "1":
            violations.append(f"{key}: token {last.token}'s delete was answered 2xx, the key holds an object")
    return violations, raced.refused()


@pytest.mark.slow
@SAFE_OR_CONTROL
async def test_racing_writes_through_two_replicas_and_a_delayed_path_land_in_token_order(
    module: str, safe: bool, s3_cluster: LocalCluster, database: str, tmp_path: Path
) -> None:
    store, prefix = s3_cluster.s3, fresh_prefix()
    async with (
        delayed_path(store) as proxy,
        _replicas(module, store, database, prefix, proxy, tmp_path) as (a, b),
    ):
        violations, refused_at_the_store = await _race(a, b, proxy, store, prefix)
    if safe:
        assert violations == []
        assert refused_at_the_store > 0, "no held write reached the store late: the race tested nothing"
    else:
        assert violations, "the control without preconditions found no violation: the check sees nothing"
