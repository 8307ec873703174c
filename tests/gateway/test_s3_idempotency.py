"""`Idempotency-Key` in front of real SeaweedFS: one application at the store, one answer for all.

Two `fencegate serve` processes on one real PostgreSQL in front of one real
SeaweedFS: identical retries sent at once and split over both replicas are
applied once (each replica counts the writes the store accepted from it:
`fencegate_upstream_round_trips_count`) and answered alike, and the store
holds the write with the request's id. The control (`unclaimed_serve`: the
key ignored, no record claimed) must apply more than once. The same key on
another request is 422 `idempotency_key_reused`, as on the built-in store.
The gateway's two replicas start once for the module (`pair`): each test
writes keys of its own and counts what was applied during it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from fencegate.lab.cluster import LocalCluster
from gateway import Settings, create_app
from gateway.app_keys import AppKeys
from gateway.conditional import ConditionalStore
from gateway.transport import REQUEST, TOMBSTONE
from storage.protocols import FencedRequest, ObjectMeta
from tests.gateway.conftest import AppClient, create_database
from tests.gateway.race_support import Replica, replica_pair
from tests.gateway.s3_support import (
    Held,
    aws_environment,
    delayed_path,
    delayed_settings,
    direct_client,
    fresh_prefix,
    held,
    use_store,
)

RETRIES = 16
TIMEOUT, HOLD = 1.0, 3.0  # the 504 case: seconds the gateway waits for the store, and the path holds
_APPLIED = re.compile(r"^fencegate_upstream_round_trips_count (\S+)$", re.MULTILINE)
ON_THE_PAIR = pytest.mark.asyncio(loop_scope="module")  # the tests on the module's two replicas


@dataclass(frozen=True)
class Pair:
    """Two replicas of one module on one fresh database, in front of one prefix of the store."""

    replicas: tuple[Replica, Replica]
    prefix: str


@contextlib.asynccontextmanager
async def _pair(module: str, store: dict[str, str], admin_dsn: str, tmp_path: Path) -> AsyncIterator[Pair]:
    prefix, dsn = fresh_prefix(), await create_database(admin_dsn)
    args = ["--storage", dsn, "--upstream", f"s3://{store['bucket']}/{prefix}",
            "--upstream-endpoint", store["endpoint"]]  # fmt: skip
    async with replica_pair(module, tmp_path, args, args, aws_environment(store, tmp_path)) as replicas:
        yield Pair(replicas, prefix)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def pair(
    s3_cluster: LocalCluster, postgres_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Pair]:
    """The gateway's replicas, shared by the module's tests: each writes keys of its own and counts
    the writes applied during it (the metrics are the replicas' totals)."""
    home = tmp_path_factory.mktemp("idempotency-pair")
    async with _pair("fencegate.cli", s3_cluster.s3, postgres_cluster.postgres_dsn, home) as shared:
        yield shared


def _key() -> str:
    return f"doc-{uuid.uuid4().hex[:8]}"


async def _applied(session: aiohttp.ClientSession, *replicas: Replica) -> int:
    """Writes the store accepted, over the replicas, since they started."""
    total = 0.0
    for replica in replicas:
        async with session.get(f"{replica.url}/metrics") as scraped:
            found = _APPLIED.search(await scraped.text())
        total += float(found.group(1)) if found else 0.0
    return int(total)


async def _retries(
    session: aiohttp.ClientSession, replicas: tuple[Replica, Replica], method: str, key: str, idem: str,
    data: bytes = b"",
) -> list[tuple[int, bytes]]:  # fmt: skip
    headers = {"Fencing-Token": "7", "Idempotency-Key": idem}

    async def send(i: int) -> tuple[int, bytes]:
        url = f"{replicas[i % 2].url}/v1/objects/{key}"
        async with session.request(method, url, data=data or None, headers=headers) as answer:
            return answer.status, await answer.read()

    return await asyncio.gather(*(send(i) for i in range(RETRIES)))


@dataclass(frozen=True)
class Retried:
    """Identical retries of a PUT, then of a DELETE: their answers, the writes each applied at the
    store, and what the store held after each."""

    put: list[tuple[int, bytes]]
    put_applied: int
    stored: Held | None
    delete: list[tuple[int, bytes]]
    delete_applied: int
    gone: Held | None


async def _put_then_delete(pair: Pair, store: dict[str, str]) -> Retried:
    key = _key()
    async with aiohttp.ClientSession() as session, direct_client(store) as s3:
        before = await _applied(session, *pair.replicas)
        put = await _retries(session, pair.replicas, "PUT", key, uuid.uuid4().hex, b"once")
        put_applied = await _applied(session, *pair.replicas) - before
        stored = await held(s3, store["bucket"], pair.prefix + key)
        delete = await _retries(session, pair.replicas, "DELETE", key, uuid.uuid4().hex)
        delete_applied = await _applied(session, *pair.replicas) - before - put_applied
        gone = await held(s3, store["bucket"], pair.prefix + key)
    return Retried(put, put_applied, stored, delete, delete_applied, gone)


@ON_THE_PAIR
async def test_identical_retries_over_two_replicas_apply_once_and_get_one_answer(
    pair: Pair, s3_cluster: LocalCluster
) -> None:
    retried = await _put_then_delete(pair, s3_cluster.s3)
    assert {status for status, _ in retried.put} == {201}, retried.put
    assert len(set(retried.put)) == 1, retried.put
    assert retried.put_applied == 1
    assert isinstance(retried.stored, Held)
    assert (retried.stored.data, retried.stored.token) == (b"once", 7)
    assert REQUEST in retried.stored.metadata
    assert {status for status, _ in retried.delete} == {200}, retried.delete
    assert len(set(retried.delete)) == 1, retried.delete
    assert retried.delete_applied == 1
    assert retried.gone is not None
    assert retried.gone.metadata.get(TOMBSTONE) == "1"


@ON_THE_PAIR
async def test_the_control_without_the_claim_applies_identical_retries_more_than_once(
    s3_cluster: LocalCluster, postgres_cluster: LocalCluster, tmp_path: Path
) -> None:
    store = s3_cluster.s3
    async with _pair(
        "tests.gateway.unclaimed_serve", store, postgres_cluster.postgres_dsn, tmp_path
    ) as control:
        retried = await _put_then_delete(control, store)
    assert (retried.put_applied, retried.delete_applied) != (1, 1), (
        "the control applied once: the count sees nothing"
    )


@ON_THE_PAIR
async def test_the_same_key_on_another_request_is_refused_and_changes_nothing(
    pair: Pair, s3_cluster: LocalCluster
) -> None:
    store, key, idem = s3_cluster.s3, _key(), uuid.uuid4().hex
    a, b = pair.replicas
    async with aiohttp.ClientSession() as session, direct_client(store) as s3:
        before = await _applied(session, a, b)
        headers = {"Fencing-Token": "7", "Idempotency-Key": idem}
        async with session.put(f"{a.url}/v1/objects/{key}", data=b"first", headers=headers) as first:
            assert first.status == 201
        for body, token in ((b"other body", "7"), (b"first", "8")):
            reused_headers = {**headers, "Fencing-Token": token}
            async with session.put(f"{b.url}/v1/objects/{key}", data=body, headers=reused_headers) as reused:
                assert (reused.status, (await reused.json())["error"]) == (422, "idempotency_key_reused")
        stored = await held(s3, store["bucket"], pair.prefix + key)
        assert stored is not None
        assert (stored.data, stored.token) == (b"first", 7)
        assert await _applied(session, a, b) - before == 1


# What the key held when the 504's retries came: nothing written since, a newer token's write, or
# another write of the same lease; what the retries are answered; what the store ends with.
SINCE = {
    "nothing-since": (None, (200, None), b"v5"),
    "a-higher-token-since": (("6", b"v6"), (409, "stale_token"), b"v6"),
    "the-same-lease-since": (("5", b"v5-later"), (503, "upstream_outcome_unknown"), b"v5-later"),
}


@pytest.mark.parametrize("since", SINCE)
async def test_the_retries_of_a_write_answered_504(
    since: str, s3_cluster: LocalCluster, aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    """One gateway on SQLite, its path to the store held past `--upstream-timeout`: the first attempt
    is 504 (its record says: no answer). Its retries decide at the store: with nothing written since,
    the write is applied once (or the first attempt's id is found there) and every retry gets that
    answer; after a higher token's write, 409; after another write of the same lease, 503 and that
    write stays (a retry never puts an older write over it)."""
    between, (status, code), final = SINCE[since]
    store, prefix = s3_cluster.s3, fresh_prefix()
    use_store(monkeypatch, store, tmp_path)
    async with delayed_path(store) as proxy:
        settings = delayed_settings(store, prefix, proxy, tmp_path, TIMEOUT)
        gateway: AppClient = await aiohttp_client(create_app(settings))
        base = await gateway.put("/v1/objects/doc", data=b"v4", headers={"Fencing-Token": "4"})
        assert base.status == 201
        headers = {"Fencing-Token": "5", "Idempotency-Key": uuid.uuid4().hex}
        await proxy.drop()  # the pool's idle connections are cut: the first attempt opens its own
        proxy.hold(HOLD)
        first = await gateway.put("/v1/objects/doc", data=b"v5", headers=headers)
        assert first.status == 504
        proxy.hold(0)
        if between is not None:
            token, body = between
            written = await gateway.put("/v1/objects/doc", data=body, headers={"Fencing-Token": token})
            assert written.status == 200, await written.text()
        answers = []
        for _ in range(3):
            retry = await gateway.put("/v1/objects/doc", data=b"v5", headers=headers)
            answers.append((retry.status, await retry.read()))
        async with direct_client(store) as s3:
            stored = await held(s3, store["bucket"], prefix + "doc")
    assert {answered for answered, _ in answers} == {status}, answers
    if code is None:
        assert len(set(answers)) == 1, answers
        assert stored is not None
        assert REQUEST in stored.metadata
    else:
        assert {json.loads(body)["error"] for _, body in answers} == {code}, answers
    assert stored is not None
    assert stored.data == final


async def test_a_retry_takes_over_from_a_claimant_that_stopped_after_its_claim(
    s3_cluster: LocalCluster, aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The first attempt claimed the record and stopped before its write (as a replica killed
    there): the record stays pending, and a retry waits the claim's window, then decides at the
    store and applies the write once."""
    store, prefix = s3_cluster.s3, fresh_prefix()
    use_store(monkeypatch, store, tmp_path)
    settings = Settings(
        data_dir=tmp_path / "data", upstream=f"s3://{store['bucket']}/{prefix}",
        upstream_endpoint=store["endpoint"],
    )  # fmt: skip
    app = create_app(settings)
    gateway: AppClient = await aiohttp_client(app)
    conditional = app[AppKeys.store]
    assert isinstance(conditional, ConditionalStore)
    conditional.records.window = 0.5
    write = conditional._write

    async def stopped(request: FencedRequest, *, settling: bool = False) -> ObjectMeta:
        if not settling:
            raise RuntimeError("the replica stopped here")
        return await write(request, settling=settling)

    monkeypatch.setattr(conditional, "_write", stopped)
    headers = {"Fencing-Token": "5", "Idempotency-Key": uuid.uuid4().hex}
    first = await gateway.put("/v1/objects/doc", data=b"v5", headers=headers)
    assert first.status == 500
    answers = []
    for _ in range(2):
        retry = await gateway.put("/v1/objects/doc", data=b"v5", headers=headers)
        answers.append((retry.status, await retry.read()))
    async with direct_client(store) as s3:
        stored = await held(s3, store["bucket"], prefix + "doc")
    assert {status for status, _ in answers} == {201}, answers
    assert len(set(answers)) == 1, answers
    assert stored is not None
    assert (stored.data, stored.token) == (b"v5", 5)
    assert REQUEST in stored.metadata


@ON_THE_PAIR
async def test_identical_retries_the_store_refuses_are_all_refused_and_write_nothing(
    pair: Pair, s3_cluster: LocalCluster
) -> None:
    """The store holds a higher token than the gateway's mark knows (written there directly): the
    claimant's write is refused at the store, its record released, and every retry, on either
    replica, meets the same refusal; the store keeps what it held."""
    store, key = s3_cluster.s3, _key()
    async with aiohttp.ClientSession() as session, direct_client(store) as s3:
        before = await _applied(session, *pair.replicas)
        await s3.put_object(
            Bucket=store["bucket"], Key=pair.prefix + key, Body=b"v9",
            Metadata={"fencing-token": "9", "fencing-resource": key},
        )  # fmt: skip
        answers = await _retries(session, pair.replicas, "PUT", key, uuid.uuid4().hex, b"stale")
        stored = await held(s3, store["bucket"], pair.prefix + key)
        applied = await _applied(session, *pair.replicas) - before
    assert {(status, json.loads(body)["error"]) for status, body in answers} == {(409, "stale_token")}
    assert stored is not None
    assert (stored.data, stored.token) == (b"v9", 9)
    assert applied == 0
