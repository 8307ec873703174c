"""`--commit-lanes`: how many PostgreSQL group-commit batches a replica keeps in flight at once."""

from __future__ import annotations

import asyncio

import pytest

from fencegate.lab.cluster import LocalCluster
from tests.gateway.conftest import MakeClient

WRITER = "fencegate-postgresql-writer-"


def writers() -> int:
    return sum(1 for task in asyncio.all_tasks() if task.get_name().startswith(WRITER))


@pytest.mark.parametrize("lanes", [1, 3])
async def test_the_writer_runs_as_many_lanes_as_asked_and_serves_concurrent_writes(
    lanes: int, make_client: MakeClient, postgres_cluster: LocalCluster, unique: str
) -> None:
    client = await make_client(storage=postgres_cluster.postgres_dsn, commit_lanes=lanes)
    assert writers() == lanes

    async def put(i: int) -> int:
        headers = {"Fencing-Token": "1", "Fencing-Resource": f"{unique}-r{i % 4}"}
        resp = await client.put(f"/v1/objects/{unique}-k{i}", data=b"x", headers=headers)
        return resp.status

    assert await asyncio.gather(*(put(i) for i in range(40))) == [201] * 40
