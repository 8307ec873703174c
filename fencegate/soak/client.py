"""The soak's HTTP client: one request to a gateway picked at random, recorded; a PUT retried to an answer.

A raw aiohttp client on purpose: the history must hold every attempt as it
went on the wire (its gateway, its send and answer times, its status or
none), which the library's `GatewayClient` does not report. Every answer is
recorded, refusals and lost answers too: the checker decides from them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from fencegate.soak.history import Call, Final, SoakHistory

POLL_EVERY = 0.2  # seconds between mark polls
RETRY_DEADLINE = 15.0  # seconds a write is retried before its outcome stays unknown: past every outage
RETRY_FIRST, RETRY_MOST = 0.05, 0.5  # seconds between a write's attempts: first, then doubling up to most
UNKNOWN = (None, 503)  # answers that leave a write's outcome open: retried


class SoakClient:
    """Requests to the gateways at `urls` with the API key `secret`, recorded in `history`; `now` is
    the run's clock (seconds since the load began)."""

    def __init__(
        self, session: aiohttp.ClientSession, *, urls: list[str], secret: str, history: SoakHistory,
        now: Callable[[], float], seed: int,
    ) -> None:  # fmt: skip
        self.session = session
        self.urls = urls
        self.history = history
        self.now = now
        self._auth = {"Authorization": f"Bearer {secret}"}
        self._rng = random.Random(seed)

    async def call(
        self,
        client: int,
        method: str,
        key: str,
        token: int,
        body: bytes = b"",
        *,
        resource: str | None = None,
        idempotency_key: str = "",
        into: list[Call] | None = None,
    ) -> Call:
        """One request to a gateway picked at random, recorded in `into` (the leased clients' calls)."""
        gateway = self._rng.randrange(len(self.urls))
        headers = {**self._auth, "Fencing-Token": str(token)}
        if resource is not None:
            headers["Fencing-Resource"] = resource
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        start = self.now()
        status: int | None = None
        data, version = b"", None
        try:
            async with self.session.request(
                method, f"{self.urls[gateway]}/v1/objects/{key}", data=body or None, headers=headers
            ) as resp:
                status, data = resp.status, await resp.read()
                if resp.status in (200, 201):
                    version = int(resp.headers.get("Object-Version", "0")) if method == "GET" else None
                    if method == "PUT":
                        version = int((await resp.json())["version"])
        except (TimeoutError, aiohttp.ClientError):
            status = None
        call = Call(
            client, gateway, method, key, token, body, start, self.now(), status, version,
            idempotency_key, data if status in (200, 201) else b"", resource or "",
        )  # fmt: skip
        (self.history.calls if into is None else into).append(call)
        return call

    async def put(
        self,
        client: int,
        key: str,
        token: int,
        body: bytes,
        *,
        resource: str | None = None,
        into: list[Call] | None = None,
    ) -> Call:
        """PUT until a definite answer (neither none nor 503) or RETRY_DEADLINE, every attempt with the
        same Idempotency-Key, token and body, so a write whose answer was lost is applied once.

        A write that took retries and was accepted is sent once more: its answer must be the same.
        """
        kw: dict[str, Any] = {
            "resource": resource,
            "idempotency_key": f"c{client}-{key}-{token}",
            "into": into,
        }
        deadline = time.monotonic() + RETRY_DEADLINE
        delay = RETRY_FIRST
        call = await self.call(client, "PUT", key, token, body, **kw)
        attempts = 1
        while call.status in UNKNOWN and time.monotonic() + delay < deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MOST)
            call = await self.call(client, "PUT", key, token, body, **kw)
            attempts += 1
        if attempts > 1 and call.status in (200, 201):
            await self.call(client, "PUT", key, token, body, **kw)
        return call

    async def poll_marks(self, resources: list[str], stop: asyncio.Event) -> None:
        """Read the marks of `resources` one after the other, each gateway in turn, until `stop`."""
        turn = 0
        while not stop.is_set():
            resource = resources[turn % len(resources)]
            url = self.urls[turn % len(self.urls)]
            turn += 1
            try:
                async with self.session.get(f"{url}/v1/fences/{resource}", headers=self._auth) as resp:
                    if resp.status == 200:
                        self.history.marks.append((resource, int((await resp.json())["highest"])))
            except (TimeoutError, aiohttp.ClientError):
                pass
            await asyncio.sleep(POLL_EVERY)

    async def finals(self, keys: list[str]) -> dict[str, Final]:
        """Each key's object as the second gateway reads it, and its mark as the first one does."""
        finals = {}
        for key in keys:
            async with self.session.get(f"{self.urls[1]}/v1/objects/{key}", headers=self._auth) as resp:
                body = await resp.read() if resp.status == 200 else None
                version = int(resp.headers["Object-Version"]) if resp.status == 200 else None
            async with self.session.get(f"{self.urls[0]}/v1/fences/{key}", headers=self._auth) as resp:
                mark = int((await resp.json())["highest"])
            finals[key] = Final(body, version, mark)
        return finals
