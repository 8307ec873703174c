"""`Idempotency-Key` in front of real SeaweedFS: one application at the store, one answer for all.

Two `fencegate serve` processes on one real PostgreSQL in front of one real
SeaweedFS: identical retries sent at once and split over both replicas are
applied once (each replica counts the writes the store accepted from it:
`fencegate_upstream_round_trips_count`) and answered alike, and the store
holds the write with the request's id. The control (`unclaimed_serve`: the
key ignored, no record claimed) must apply more than once. The same key on
another request is 422 `idempotency_key_reused`, as on the built-in store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fencegate.lab.cluster import LocalCluster
from gateway import Settings, create_app
from gateway.conditional import REQUEST, TOMBSTONE, ConditionalStore
from gateway.keys import AppKeys
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


@pytest.fixture
async def database(postgres_cluster: LocalCluster) -> str:
    return await create_database(postgres_cluster.postgres_dsn)


def _replicas(
    module: str, store: dict[str, str], dsn: str, prefix: str, tmp_path: Path
) -> contextlib.AbstractAsyncContextManager[tuple[Replica, Replica]]:
    args = ["--storage", dsn, "--upstream", f"s3://{store['bucket']}/{prefix}",
            "--upstream-endpoint", store["endpoint"]]  # fmt: skip
    return replica_pair(module, tmp_path, args, args, aws_environment(store, tmp_path))


async def _applied(session: aiohttp.ClientSession, *replicas: Replica) -> int:
    """Writes the store accepted, over the replicas."""
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


@pytest.mark.parametrize(
    ("module", "claimed"), [("fencegate.cli", True), ("tests.gateway.unclaimed_serve", False)],
    ids=["claimed", "control-without-the-claim"],
)  # fmt: skip
async def test_identical_retries_over_two_replicas_apply_once_and_get_one_answer(
    module: str, claimed: bool, s3_cluster: LocalCluster, database: str, tmp_path: Path
) -> None:
    store, prefix = s3_cluster.s3, fresh_prefix()
    async with (
        _replicas(module, store, database, prefix, tmp_path) as (a, b),
        aiohttp.ClientSession() as session,
        direct_client(store) as s3,
    ):
        put = await _retries(session, (a, b), "PUT", "doc", uuid.uuid4().hex, b"once")
        put_applied = await _applied(session, a, b)
        stored = await held(s3, store["bucket"], prefix + "doc")
        delete = await _retries(session, (a, b), "DELETE", "doc", uuid.uuid4().hex)
        delete_applied = await _applied(session, a, b) - put_applied
        gone = await held(s3, store["bucket"], prefix + "doc")
    if not claimed:
        assert (put_applied, delete_applied) != (1, 1), "the control applied once: the count sees nothing"
        return
    assert {status for status, _ in put} == {201}, put
    assert len(set(put)) == 1, put
    assert put_applied == 1
    assert isinstance(stored, Held)
    assert (stored.data, stored.token) == (b"once", 7)
    assert REQUEST in stored.metadata
    assert {status for status, _ in delete} == {200}, delete
    assert len(set(delete)) == 1, delete
    assert delete_applied == 1
    assert gone is not None
    assert gone.metadata.get(TOMBSTONE) == "1"


async def test_the_same_key_on_another_request_is_refused_and_changes_nothing(
    s3_cluster: LocalCluster, database: str, tmp_path: Path
) -> None:
    store, prefix, idem = s3_cluster.s3, fresh_prefix(), uuid.uuid4().hex
    async with (
        _replicas("fencegate.cli", store, database, prefix, tmp_path) as (a, b),
        aiohttp.ClientSession() as session,
        direct_client(store) as s3,
    ):
        headers = {"Fencing-Token": "7", "Idempotency-Key": idem}
        async with session.put(f"{a.url}/v1/objects/doc", data=b"first", headers=headers) as first:
            assert first.status == 201
        for body, token in ((b"other body", "7"), (b"first", "8")):
            reused_headers = {**headers, "Fencing-Token": token}
            async with session.put(f"{b.url}/v1/objects/doc", data=body, headers=reused_headers) as reused:
                assert (reused.status, (await reused.json())["error"]) == (422, "idempotency_key_reused")
        stored = await held(s3, store["bucket"], prefix + "doc")
        assert stored is not None
        assert (stored.data, stored.token) == (b"first", 7)
        assert await _applied(session, a, b) == 1


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


async def test_identical_retries_the_store_refuses_are_all_refused_and_write_nothing(
    s3_cluster: LocalCluster, database: str, tmp_path: Path
) -> None:
    """The store holds a higher token than the gateway's mark knows (written there directly): the
    claimant's write is refused at the store, its record released, and every retry, on either
    replica, meets the same refusal; the store keeps what it held."""
    store, prefix = s3_cluster.s3, fresh_prefix()
    async with (
        _replicas("fencegate.cli", store, database, prefix, tmp_path) as (a, b),
        aiohttp.ClientSession() as session,
        direct_client(store) as s3,
    ):
        await s3.put_object(
            Bucket=store["bucket"], Key=prefix + "doc", Body=b"v9",
            Metadata={"fencing-token": "9", "fencing-resource": "doc"},
        )  # fmt: skip
        answers = await _retries(session, (a, b), "PUT", "doc", uuid.uuid4().hex, b"stale")
        stored = await held(s3, store["bucket"], prefix + "doc")
        applied = await _applied(session, a, b)
    assert {(status, json.loads(body)["error"]) for status, body in answers} == {(409, "stale_token")}
    assert stored is not None
    assert (stored.data, stored.token) == (b"v9", 9)
    assert applied == 0
