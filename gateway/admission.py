"""The counts admission keeps: requests in flight per client, and draining at shutdown.

`ClientLimiter`: past `max_client_requests` in flight, a client's request is
answered 429 at once, so one client cannot hold every connection slot or
fill the write queue while others wait.

`Drain` is graceful shutdown's half inside the app: once draining, new
requests are answered 503 `shutting_down` (and `/readyz` says so, so a load
balancer moves on), while requests already admitted run to the end, their
bodies included; `fencegate serve` waits for them (bounded) before it closes
connections and storage.
"""

from __future__ import annotations

import asyncio

from gateway.errors import OverClientLimit, Unavailable


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
            raise OverClientLimit(
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
