"""The soak's HTTP client: the library's `GatewayClient`, every send recorded in the history by its hook.

The history must hold every attempt as it went on the wire (its gateway,
its send and answer times, its status or none): `GatewayClient`'s `on_send`
hands each send over, retries included, and `_record` turns it into a
`Call`. Every answer is recorded, refusals and lost answers too: the checker
decides from them, and the errors `GatewayClient` raises for them are caught
here. Each call goes to a gateway picked at random (seeded); a write's
retries go to the gateway its call picked.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from fencegate.soak.history import Call, Final, SoakHistory
from lockclient import GatewayClient, GatewayError, GatewayRetry, Send

POLL_EVERY = 0.2  # seconds between mark polls
RETRY_DEADLINE = 15.0  # seconds a write is retried before its outcome stays unknown: past every outage
RETRY_FIRST, RETRY_MOST = 0.05, 0.5  # seconds between a write's attempts: first, then doubling up to most


def retry_attempts(first: float, most: float, deadline: float) -> int:
    """Sends whose pauses (`first`, doubling up to `most`) start before `deadline` seconds have gone by."""
    attempts, waited, delay = 1, 0.0, first
    while waited + delay < deadline:
        waited += delay
        delay = min(delay * 2, most)
        attempts += 1
    return attempts


# A write's resends while its outcome is unknown (no answer, or a 5xx but 501), under its one key. The
# sends' own time comes on top of the pauses: a 503 comes within the gateways' storage timeout (3 s).
RETRY = GatewayRetry(
    attempts=retry_attempts(RETRY_FIRST, RETRY_MOST, RETRY_DEADLINE),
    delay=RETRY_FIRST,
    max_delay=RETRY_MOST,
    jitter=0.0,
)


@dataclass
class _Request:
    """What a call sends beside what `Send` shows, and the records of its sends so far."""

    client: int
    key: str
    token: int
    body: bytes
    resource: str
    idempotency_key: str
    into: list[Call]
    sent: list[Call] = field(default_factory=list)


# The call the running task is making: the hooks record only the load's calls, not polls or final reads.
_CURRENT: contextvars.ContextVar[_Request | None] = contextvars.ContextVar("soak_request", default=None)


class SoakClient:
    """Requests to the gateways at `urls` with the API key `secret`, recorded in `history`; `now` is
    the run's clock (`time.monotonic()` less the load's start)."""

    def __init__(
        self, session: aiohttp.ClientSession, *, urls: list[str], secret: str, history: SoakHistory,
        now: Callable[[], float], seed: int,
    ) -> None:  # fmt: skip
        self.urls = urls
        self.history = history
        self.now = now
        self._rng = random.Random(seed)

        def gateway(i: int, retry: GatewayRetry | None) -> GatewayClient:
            record = functools.partial(self._record, i)
            return GatewayClient(urls[i], api_key=secret, session=session, retry=retry, on_send=record)

        self._once = [gateway(i, None) for i in range(len(urls))]  # each request sent once
        self._retried = [gateway(i, RETRY) for i in range(len(urls))]  # writes resent under their key

    def _record(self, gateway: int, send: Send) -> None:
        """`on_send` of gateway number `gateway`: the send as a `Call` of the request in flight."""
        request = _CURRENT.get()
        if request is None:
            return
        version = None
        answered = send.status in (200, 201)
        if answered and send.method == "PUT":
            version = int(json.loads(send.response_body)["version"])
        elif answered and send.method == "GET":
            version = int(send.response_headers.get("Object-Version", "0"))
        clock = time.monotonic() - self.now()  # the monotonic time at which the run's clock read 0
        call = Call(
            request.client, gateway, send.method, request.key, request.token, request.body,
            send.started - clock, send.ended - clock, send.status, version, request.idempotency_key,
            send.response_body if answered else b"", request.resource,
        )  # fmt: skip
        request.sent.append(call)
        request.into.append(call)

    async def _send(self, gateway: GatewayClient, method: str, request: _Request) -> list[Call]:
        """`method` through `gateway`; the records of its sends, whatever the gateway answered."""
        key, token, resource = request.key, request.token, request.resource or None
        once = request.idempotency_key or None
        reset = _CURRENT.set(request)
        try:
            if method == "GET":
                await gateway.get(key, token=token, resource=resource)
            elif method == "PUT":
                await gateway.put(key, request.body, token=token, resource=resource, idempotency_key=once)
            else:
                await gateway.delete(key, token=token, resource=resource, idempotency_key=once)
        except GatewayError:
            pass  # a refusal or an unknown outcome: its sends are recorded, the checker judges them
        finally:
            _CURRENT.reset(reset)
        if not request.sent:
            raise AssertionError(f"{method} {request.key}: no send was recorded")
        return request.sent

    def _request(
        self, client: int, key: str, token: int, body: bytes, resource: str | None, once: str,
        into: list[Call] | None,
    ) -> _Request:  # fmt: skip
        calls = self.history.calls if into is None else into
        return _Request(client, key, token, body, resource or "", once, calls)

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
        gateway = self._once[self._rng.randrange(len(self.urls))]
        request = self._request(client, key, token, body, resource, idempotency_key, into)
        return (await self._send(gateway, method, request))[-1]

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
        """PUT until a definite answer or RETRY's sends run out (about RETRY_DEADLINE), every attempt
        to the same gateway with the same Idempotency-Key, token and body, so a write whose answer was
        lost is applied once.

        A write that took retries and was accepted is sent once more: its answer must be the same.
        """
        once = f"c{client}-{key}-{token}"
        gateway = self._retried[self._rng.randrange(len(self.urls))]
        sent = await self._send(gateway, "PUT", self._request(client, key, token, body, resource, once, into))
        if len(sent) > 1 and sent[-1].status in (200, 201):
            await self.call(
                client, "PUT", key, token, body, resource=resource, idempotency_key=once, into=into
            )
        return sent[-1]

    async def poll_marks(self, resources: list[str], stop: asyncio.Event) -> None:
        """Read the marks of `resources` one after the other, each gateway in turn, until `stop`."""
        turn = 0
        while not stop.is_set():
            resource = resources[turn % len(resources)]
            gateway = self._once[turn % len(self.urls)]
            turn += 1
            with contextlib.suppress(GatewayError):  # no mark read this turn
                self.history.marks.append((resource, await gateway.fence(resource)))
            await asyncio.sleep(POLL_EVERY)

    async def finals(self, keys: list[str]) -> dict[str, Final]:
        """Each key's object as the second gateway reads it, and its mark as the first one does."""
        finals = {}
        for key in keys:
            body, version = None, None
            try:
                read = await self._once[1].get(key)
                body, version = read.data, read.version
            except GatewayError as exc:  # an answer but 200 (a 404): no object
                if exc.status is None:
                    raise  # no answer: the run cannot be judged without its final state
            finals[key] = Final(body, version, await self._once[0].fence(key))
        return finals
