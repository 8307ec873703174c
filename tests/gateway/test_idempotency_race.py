"""Concurrent retries of one write with one `Idempotency-Key`: one application, one answer for all.

The retries arrive at once, as a client's retry policy, a load balancer's
retry and an impatient user can make them: on each engine in one gateway,
and split over two `fencegate serve` replicas on one PostgreSQL, where the
idempotency record is claimed inside the write's transaction with a conflict
clause (no IntegrityError, no 503). The same key on another request is
refused with its own code and changes nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from fencegate.lab.cluster import LocalCluster
from tests.gateway.conftest import AppClient
from tests.gateway.processes import GatewayProcess

RETRIES = 20


def headers(idempotency_key: str, token: int = 7) -> dict[str, str]:
    return {"Fencing-Token": str(token), "Idempotency-Key": idempotency_key}


async def test_concurrent_identical_retries_apply_once_and_all_get_the_first_outcome(
    engine_client: AppClient,
) -> None:
    key, idem = f"r{uuid.uuid4().hex[:10]}/doc", uuid.uuid4().hex

    async def put() -> tuple[int, bytes]:
        resp = await engine_client.put(f"/v1/objects/{key}", data=b"once", headers=headers(idem))
        return resp.status, await resp.read()

    answers = await asyncio.gather(*(put() for _ in range(RETRIES)))
    assert {status for status, _ in answers} == {201}, answers
    assert len({body for _, body in answers}) == 1
    stored = await engine_client.get(f"/v1/objects/{key}")
    assert (await stored.read(), stored.headers["Object-Version"]) == (b"once", "1")


async def test_the_same_key_on_another_request_is_refused_and_changes_nothing(
    engine_client: AppClient,
) -> None:
    key, idem = f"r{uuid.uuid4().hex[:10]}/doc", uuid.uuid4().hex
    first = await engine_client.put(f"/v1/objects/{key}", data=b"first", headers=headers(idem))
    assert first.status == 201
    for body, token in ((b"other body", 7), (b"first", 8)):
        reused = await engine_client.put(f"/v1/objects/{key}", data=body, headers=headers(idem, token))
        assert (reused.status, (await reused.json())["error"]) == (422, "idempotency_key_reused")
    stored = await engine_client.get(f"/v1/objects/{key}")
    assert (await stored.read(), stored.headers["Object-Version"]) == (b"first", "1")
    fence = await engine_client.get(f"/v1/fences/{key}")
    assert (await fence.json())["highest"] == 7  # token 8 was refused before the fence


@pytest.fixture
def replicas(postgres_cluster: LocalCluster, tmp_path: Path) -> Iterator[list[str]]:
    procs = [
        GatewayProcess(tmp_path / f"gw{i}.log", "--storage", postgres_cluster.postgres_dsn) for i in (1, 2)
    ]
    try:
        yield [proc.start() for proc in procs]
    finally:
        for proc in procs:
            proc.stop()


async def test_retries_split_over_two_replicas_apply_once_with_no_5xx(replicas: list[str]) -> None:
    async with aiohttp.ClientSession() as session:
        for round_ in range(3):
            key, idem = f"r{uuid.uuid4().hex[:10]}/doc{round_}", uuid.uuid4().hex

            async def put(url: str, key: str = key, idem: str = idem) -> tuple[int, bytes]:
                async with session.put(f"{url}/v1/objects/{key}", data=b"once", headers=headers(idem)) as r:
                    return r.status, await r.read()

            answers = await asyncio.gather(*(put(replicas[i % 2]) for i in range(RETRIES)))
            assert {status for status, _ in answers} == {201}, answers
            assert len({body for _, body in answers}) == 1
            async with session.get(f"{replicas[0]}/v1/objects/{key}") as r:
                assert (await r.read(), r.headers["Object-Version"]) == (b"once", "1")
