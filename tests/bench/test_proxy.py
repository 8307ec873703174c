"""The proxy bench measures what it names: fenced PUTs through one and two real replicas, one request to
the store each, against the same PUTs straight to SeaweedFS.

On the suite's PostgreSQL and SeaweedFS, as the bench runs them. Speed is
never asserted: the smoke run has to produce every case's numbers, both
goals with the CPU note, and exactly one request to the store per fenced
write (each replica's cache knows the version it wrote last).
"""

from __future__ import annotations

import math
from pathlib import Path

from fencegate.bench import proxy
from fencegate.bench.env import BenchEnv
from fencegate.bench.pinning import can_pin
from fencegate.lab.cluster import LocalCluster


async def test_the_smoke_run_measures_every_case_one_store_request_per_fenced_write(
    postgres_cluster: LocalCluster, s3_cluster: LocalCluster, tmp_path: Path
) -> None:
    env = BenchEnv(postgres_cluster, tmp_path, runs=1, ops=64, seconds=0.1, quiet=True)
    weed = [node.pid for node in s3_cluster.nodes.values() if node.kind == "s3" and node.pid is not None]
    section = await proxy.measure_proxy(
        env, s3_cluster.s3, postgres_cluster.postgres_dsn, weed=weed, postgres=postgres_cluster.postgres_pids
    )
    assert [r.name for r in section.results][: len(proxy.CASES)] == list(proxy.CASES)
    assert all(r.rates and all(rate > 0 for rate in r.rates) for r in section.results)
    assert [g.name for g in section.goals] == ["1 replica / direct", "2 replicas / direct"]
    assert all(math.isfinite(g.value) and (g.op, g.bound) == (">=", proxy.GOAL) for g in section.goals)
    assert all("CPU per write" in g.note for g in section.goals)  # what this machine allows
    assert section.extra["requests to the store per fenced write"] == 1.0
    cpu = {name: value for name, value in section.extra.items() if name.startswith("CPU µs per write")}
    pinned = len(proxy.CASES) * 2 if can_pin() else 0  # the store's core and the other, per case
    assert len(cpu) == len(proxy.CASES) * (1 + len(proxy.PARTS)) + pinned
    assert cpu[f"CPU µs per write, {proxy.ONE}: replicas"] > 0  # the replicas' own CPU is counted
    groups = {r.group for r in section.results}
    assert groups == ({"s3 proxy", "s3 proxy, store on its own core"} if can_pin() else {"s3 proxy"})
