"""Concurrent retries of one write with one `Idempotency-Key`: one application, one answer for all.

The retries arrive at once, as a client's retry policy, a load balancer's
retry and an impatient user can make them: on each engine in one gateway,
and split over two `fencegate serve` replicas on one database (SQLite, and
PostgreSQL, where the idempotency record is claimed inside the write's
transaction with a conflict clause: no IntegrityError, no 503). The same key on another request is
refused with its own code and changes nothing, also when the requests
arrive at once.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import aiohttp

from tests.gateway.conftest import AppClient

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


async def test_retries_split_over_two_replicas_apply_once_with_no_5xx(replicas: list[str]) -> None:
    async with aiohttp.ClientSession() as session:

        async def send(i: int, method: str, key: str, idem: str, data: bytes = b"") -> tuple[int, bytes]:
            url = f"{replicas[i % 2]}/v1/objects/{key}"
            async with session.request(method, url, data=data, headers=headers(idem)) as r:
                return r.status, await r.read()

        for round_ in range(3):
            key, idem = f"r{uuid.uuid4().hex[:10]}/doc{round_}", uuid.uuid4().hex
            answers = await asyncio.gather(*(send(i, "PUT", key, idem, b"once") for i in range(RETRIES)))
            assert {status for status, _ in answers} == {201}, answers
            assert len({body for _, body in answers}) == 1
            async with session.get(f"{replicas[0]}/v1/objects/{key}") as r:
                assert (await r.read(), r.headers["Object-Version"]) == (b"once", "1")

            idem = uuid.uuid4().hex
            answers = await asyncio.gather(*(send(i, "DELETE", key, idem) for i in range(RETRIES)))
            assert {status for status, _ in answers} == {200}, answers
            assert len({body for _, body in answers}) == 1


async def test_one_key_sent_with_different_requests_at_once_applies_one_and_refuses_the_rest(
    engine_client: AppClient,
) -> None:
    """A buggy client reusing one Idempotency-Key for many writes at once: one applies, no 5xx."""
    key, idem = f"r{uuid.uuid4().hex[:10]}/doc", uuid.uuid4().hex

    async def put(i: int) -> tuple[int, dict[str, object]]:
        resp = await engine_client.put(f"/v1/objects/{key}", data=b"body %d" % i, headers=headers(idem))
        return resp.status, await resp.json()

    answers = await asyncio.gather(*(put(i) for i in range(RETRIES)))
    applied = [i for i, (status, _) in enumerate(answers) if status == 201]
    refused = [body["error"] for status, body in answers if status != 201]
    assert (len(applied), refused) == (1, ["idempotency_key_reused"] * (RETRIES - 1)), answers
    stored = await engine_client.get(f"/v1/objects/{key}")
    assert (await stored.read(), stored.headers["Object-Version"]) == (b"body %d" % applied[0], "1")


async def test_different_requests_under_one_key_over_two_replicas_apply_one(replicas: list[str]) -> None:
    key, idem = f"r{uuid.uuid4().hex[:10]}/doc", uuid.uuid4().hex
    async with aiohttp.ClientSession() as session:

        async def put(i: int) -> tuple[int, dict[str, object]]:
            url = f"{replicas[i % 2]}/v1/objects/{key}"
            async with session.put(url, data=b"body %d" % i, headers=headers(idem)) as r:
                return r.status, json.loads(await r.read())

        answers = await asyncio.gather(*(put(i) for i in range(RETRIES)))
        applied = [i for i, (status, _) in enumerate(answers) if status == 201]
        refused = [body["error"] for status, body in answers if status != 201]
        assert (len(applied), refused) == (1, ["idempotency_key_reused"] * (RETRIES - 1)), answers
        async with session.get(f"{replicas[1]}/v1/objects/{key}") as r:
            assert (await r.read(), r.headers["Object-Version"]) == (b"body %d" % applied[0], "1")


async def test_concurrent_retries_of_a_delete_all_get_the_delete_not_a_404(engine_client: AppClient) -> None:
    """The retries that run after the first committed find no object: they must replay its 200, not 404."""
    key, idem = f"r{uuid.uuid4().hex[:10]}/doc", uuid.uuid4().hex
    assert (
        await engine_client.put(f"/v1/objects/{key}", data=b"x", headers={"Fencing-Token": "7"})
    ).status == 201

    async def delete() -> tuple[int, bytes]:
        resp = await engine_client.delete(f"/v1/objects/{key}", headers=headers(idem))
        return resp.status, await resp.read()

    answers = await asyncio.gather(*(delete() for _ in range(RETRIES)))
    assert {status for status, _ in answers} == {200}, answers
    assert len({body for _, body in answers}) == 1
    assert (await engine_client.get(f"/v1/objects/{key}")).status == 404


async def test_a_delete_answered_404_is_answered_404_again_after_the_key_was_written(
    engine_client: AppClient,
) -> None:
    """The 404 is the delete's outcome: its retry must not delete the object a PUT of the same lease
    wrote since (it did, answering 200: one request, two outcomes)."""
    key, idem = f"r{uuid.uuid4().hex[:10]}/doc", uuid.uuid4().hex
    first = await engine_client.delete(f"/v1/objects/{key}", headers=headers(idem, 10))
    assert (first.status, (await first.json())["error"]) == (404, "not_found")
    written = await engine_client.put(f"/v1/objects/{key}", data=b"kept", headers={"Fencing-Token": "10"})
    assert written.status == 201
    retry = await engine_client.delete(f"/v1/objects/{key}", headers=headers(idem, 10))
    assert (retry.status, await retry.json()) == (404, await first.json())
    stored = await engine_client.get(f"/v1/objects/{key}")
    assert (stored.status, await stored.read()) == (200, b"kept")
    other = await engine_client.put(f"/v1/objects/{key}", data=b"x", headers=headers(idem, 11))
    assert (other.status, (await other.json())["error"]) == (422, "idempotency_key_reused")


async def test_retries_of_a_delete_racing_a_write_over_two_replicas_all_get_one_outcome(
    replicas: list[str],
) -> None:
    """Identical retries of one delete, split over two replicas, race a PUT of the same lease: some
    ran before it (404), some after (200) until the 404 was recorded; all must get the same answer."""
    async with aiohttp.ClientSession() as session:

        async def delete(i: int, key: str, idem: str) -> tuple[int, bytes]:
            url = f"{replicas[i % 2]}/v1/objects/{key}"
            async with session.delete(url, headers=headers(idem, 10)) as r:
                return r.status, await r.read()

        async def put(key: str) -> int:
            async with session.put(
                f"{replicas[1]}/v1/objects/{key}", data=b"w", headers={"Fencing-Token": "10"}
            ) as r:
                return r.status

        for _ in range(5):
            key, idem = f"r{uuid.uuid4().hex[:10]}/doc", uuid.uuid4().hex
            writing = asyncio.ensure_future(put(key))
            answers = await asyncio.gather(*(delete(i, key, idem) for i in range(8)))
            assert await writing in (200, 201)
            assert len(set(answers)) == 1, answers
            assert {status for status, _ in answers} <= {200, 404}, answers
