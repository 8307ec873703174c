"""A short fenced load against a deployment, and the check that nothing went wrong.

Workers loop: take a Redlock lease (its token drawn from the deployment's
token source), PUT the resource's object through the load balancer with that
lease, release. Every acknowledged write is recorded with the version the
gateway gave it. Afterwards the objects and marks are read back and held to
the gateway's promises, whichever replica served each request:

- per resource, in commit order (the object's version), accepted tokens
  never go back;
- no acknowledged write was lost: acknowledged versions are distinct, the
  final object is the newest acknowledged write (or a newer write whose
  answer was lost, 5xx, of which there must be enough), and the mark is at
  least the highest acknowledged token;
- the fence refuses: a write with a token below the newest acknowledged
  one is answered 409 and changes nothing (load under honest leases never
  sends one, so a gateway that accepts every token would pass without it).

`fencegate cluster check` runs it against the native topology (`--dir`) or
against any deployment by URL (compose's `lab` service).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fencegate.lab.cluster.errors import ClusterError
from lockclient import (
    FetchedObject,
    GatewayClient,
    GatewayError,
    LockLost,
    LockNotAcquired,
    Redlock,
    StaleToken,
    TokenSourceError,
)
from lockclient.protocols import TokenSource

LEASE_TTL = 5.0  # seconds; far above one PUT on loopback, so a lease lapses only under a fault
ACQUIRE_TIMEOUT = 3.0  # seconds a worker waits for a busy resource before counting a miss
BACKOFF = 0.05  # seconds a worker waits after an error before its next attempt
STALE_PROBE = b"stale probe: the fence must refuse this"


@dataclass(frozen=True, slots=True)
class Ack:
    """One write the gateway acknowledged (2xx)."""

    resource: str
    token: int
    version: int
    data: bytes


@dataclass
class Ledger:
    """What the workers saw; the test can watch it while the load runs."""

    acks: list[Ack] = field(default_factory=list)
    unknown: Counter[str] = field(default_factory=Counter)  # writes answered 5xx or not at all
    stale: int = 0
    missed: int = 0  # leases not acquired in time, or lost before the write
    token_errors: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "acknowledged": len(self.acks),
            "unknown_outcome": sum(self.unknown.values()),
            "stale_refused": self.stale,
            "leases_missed": self.missed,
            "token_source_errors": self.token_errors,
        }


async def _worker(
    index: int, *, gateway: GatewayClient, locker: Redlock[int], resources: Sequence[str],
    stop: asyncio.Event, ledger: Ledger,
) -> None:  # fmt: skip
    rng = random.Random(index)
    seq = 0
    while not stop.is_set():
        resource = rng.choice(resources)
        seq += 1
        try:
            async with locker.lock(resource, ttl=LEASE_TTL, timeout=ACQUIRE_TIMEOUT) as lease:
                data = f"{index}:{seq}:{lease.token}".encode()
                try:
                    info = await gateway.put(resource, data, lease=lease)
                except StaleToken:
                    ledger.stale += 1
                    continue
                except GatewayError as exc:
                    if exc.status is not None and exc.status < 500:
                        raise
                    ledger.unknown[resource] += 1
                    await asyncio.sleep(BACKOFF)
                    continue
                if info.token is None or info.version is None:
                    raise ClusterError(
                        "the gateway reports no object versions (proxy mode): nothing to check"
                    )
                ledger.acks.append(Ack(resource, info.token, info.version, data))
        except (LockNotAcquired, LockLost):
            ledger.missed += 1
        except TokenSourceError:
            ledger.token_errors += 1
            await asyncio.sleep(BACKOFF)


async def drive(
    *, gateway: GatewayClient, locker: Redlock[int], resources: Sequence[str], workers: int,
    stop: asyncio.Event, ledger: Ledger,
) -> None:  # fmt: skip
    """Run `workers` lease-and-write loops until `stop` is set (or one of them fails)."""
    tasks = [
        asyncio.create_task(
            _worker(i, gateway=gateway, locker=locker, resources=resources, stop=stop, ledger=ledger)
        )
        for i in range(workers)
    ]
    try:
        await asyncio.gather(*tasks)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)


async def verify(gateway: GatewayClient, ledger: Ledger, resources: Sequence[str]) -> list[str]:
    """Every broken promise, as one line each (empty: the run was clean)."""
    problems: list[str] = []
    for resource in resources:
        acks = sorted((a for a in ledger.acks if a.resource == resource), key=lambda a: a.version)
        if not acks:
            continue
        for before, after in itertools.pairwise(acks):
            if after.version == before.version:
                problems.append(f"{resource}: two acknowledged writes share version {after.version}")
            if after.token < before.token:
                problems.append(
                    f"{resource}: token went back from {before.token} (v{before.version}) "
                    f"to {after.token} (v{after.version})"
                )
        final = await gateway.get(resource)
        newest = acks[-1]
        if final.version is None or final.version < newest.version:
            problems.append(
                f"{resource}: acknowledged v{newest.version} lost, the object is v{final.version}"
            )
        elif final.version == newest.version and final.data != newest.data:
            problems.append(f"{resource}: v{newest.version} holds other bytes than were acknowledged")
        elif final.version - len(acks) > ledger.unknown[resource]:
            problems.append(
                f"{resource}: v{final.version} after {len(acks)} acknowledged and "
                f"{ledger.unknown[resource]} unknown writes: a write came from nowhere"
            )
        mark = await gateway.fence(resource)
        top = max(a.token for a in acks)
        if mark < top:
            problems.append(f"{resource}: mark {mark} is below the acknowledged token {top}")
        if top > 1:
            problems += await _stale_probe(gateway, resource, top - 1, final)
    return problems


async def _stale_probe(gateway: GatewayClient, resource: str, token: int, final: FetchedObject) -> list[str]:
    """Write with `token`, below an acknowledged one: the fence must answer 409 and change nothing."""
    try:
        info = await gateway.put(resource, STALE_PROBE, token=token, resource=resource)
    except StaleToken:
        pass
    except GatewayError as exc:
        return [f"{resource}: a write with the stale token {token} got {exc.status}, not 409 stale_token"]
    else:
        return [f"{resource}: a write with the stale token {token} was accepted as v{info.version}: "
                "a stale writer gets through"]  # fmt: skip
    after = await gateway.get(resource)
    if (after.version, after.data) != (final.version, final.data):
        return [
            f"{resource}: a refused stale write changed the object (v{final.version} -> v{after.version})"
        ]
    return []


async def check_deployment(
    *, gateway_url: str, redis: Sequence[str], tokens: TokenSource, seconds: float, workers: int,
    resources: int, api_key: str | None = None, prefix: str = "loadcheck", ssl_ca_certs: str | None = None,
    ssl_certfile: str | None = None, ssl_keyfile: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Drive load for `seconds`, verify, and return the summary (`problems` empty when clean).

    `ssl_*` are the `GatewayClient`'s TLS settings, for an HTTPS gateway (mutual TLS with a certificate).
    """
    run = f"{prefix}/{time.time_ns()}"
    names = [f"{run}/r{i}" for i in range(resources)]
    ledger = Ledger()
    stop = asyncio.Event()
    async with (
        Redlock(redis, tokens=tokens) as locker,
        GatewayClient(
            gateway_url,
            api_key=api_key,
            ssl_ca_certs=ssl_ca_certs,
            ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile,
        ) as gateway,
    ):
        load = asyncio.create_task(
            drive(gateway=gateway, locker=locker, resources=names, workers=workers, stop=stop, ledger=ledger)
        )
        await asyncio.wait({load}, timeout=seconds)
        stop.set()
        await load
        problems = await verify(gateway, ledger, names)
    return {"prefix": run, **ledger.summary(), "problems": problems}
