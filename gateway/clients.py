"""Admission: who a request comes from, how many it may have in flight, and draining at shutdown.

A client is its API key's name when keys are configured and the request
presents a valid one (or, with mutual TLS and no bearer key, its client
certificate names one), otherwise its certificate's name (`cert:<CN>`) or
its peer address. The identity is computed
once per request by `client_middleware` (the views reuse the key it found),
names the client in the audit trail and in idempotency records, and is what
the per-client cap counts: past `max_client_requests` in flight, a request is
answered 429 at once, so one client cannot hold every connection slot or
fill the write queue while others wait. Probes (`/healthz`, `/readyz`,
`/metrics`) are not counted: a load balancer behind one address must
always be able to ask.

`Drain` is graceful shutdown's half inside the app: once draining, new
requests are answered 503 `shutting_down` (and `/readyz` says so, so a load
balancer moves on), while requests already admitted run to the end, their
bodies included; `fencegate serve` waits for them (bounded) before it closes
connections and storage.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.auth import ApiKey
from gateway.errors import TooManyRequests, Unauthorized, Unavailable
from gateway.keys import AppKeys, RequestKeys
from gateway.tls import peer_name

PROBES = frozenset({"/healthz", "/readyz", "/metrics"})


class ClientLimiter:
    """Counts requests in flight per client and refuses those over the cap."""

    def __init__(self, *, limit: int) -> None:
        self._limit = limit
        self._in_flight: dict[str, int] = {}

    def in_flight(self, client: str) -> int:
        return self._in_flight.get(client, 0)

    def acquire(self, client: str) -> None:
        """Take one slot of `client`; 429 if none is free. Pair with `release` in a `finally`."""
        count = self._in_flight.get(client, 0)
        if count >= self._limit:
            raise TooManyRequests(
                f"client {client!r} already has {count} requests in flight (the limit is {self._limit}); "
                "wait for answers before sending more",
                fields={"client": client, "limit": self._limit},
            )
        self._in_flight[client] = count + 1

    def release(self, client: str) -> None:
        left = self._in_flight[client] - 1
        if left:
            self._in_flight[client] = left
        else:
            del self._in_flight[client]


class Drain:
    """Requests in flight, and whether the gateway has stopped admitting new ones."""

    def __init__(self) -> None:
        self.draining = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def admit(self) -> None:
        """Count one more request in flight; 503 once draining. Pair with `done` in a `finally`."""
        if self.draining:
            raise Unavailable(
                "the gateway is shutting down and admits no new requests; nothing was written, retry on "
                "another gateway",
                code="shutting_down",
            )
        self._in_flight += 1
        if self._in_flight == 1:
            self._idle.clear()

    def done(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self._idle.set()

    async def drain(self, grace: float) -> bool:
        """Stop admitting; wait up to `grace` seconds for admitted requests; True if none is left."""
        self.draining = True
        try:
            async with asyncio.timeout(grace):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True


def _identify(request: web.Request) -> tuple[str, ApiKey | None]:
    api_keys = request.app[AppKeys.api_keys]
    header = request.headers.get("Authorization")
    if api_keys is not None and header is not None:
        with contextlib.suppress(Unauthorized):
            key = api_keys.identify(header)
            return f"key:{key.name}", key
    subject = peer_name(request) if request.app[AppKeys.settings].mutual_tls else None
    if subject is None:
        return f"ip:{request.remote or 'unknown'}", None
    named = api_keys.named(subject) if api_keys is not None and header is None else None
    if named is not None:
        return f"key:{named.name}", named
    return f"cert:{subject}", None


@web.middleware
async def client_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Name the client (`RequestKeys.client`, `RequestKeys.api_key`) and hold one of its slots."""
    client, key = _identify(request)
    request[RequestKeys.client] = client
    request[RequestKeys.api_key] = key
    if request.path in PROBES:
        return await handler(request)
    # Plain calls rather than context managers: this runs on every request.
    drain, limiter = request.app[AppKeys.drain], request.app[AppKeys.limiter]
    drain.admit()
    try:
        limiter.acquire(client)
        try:
            return await handler(request)
        finally:
            limiter.release(client)
    finally:
        drain.done()
