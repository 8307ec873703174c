"""The unleased writers: fenced PUTs at the gateways' pace, beside the leased clients.

The leased clients write once per lease, a few dozen writes a second in all:
a fault under that trickle proves little. Each writer here owns resources no
lease touches (`<prefix>w<i>-r<j>`), writes a fresh key per request under
them, keeps `in_flight` requests going at once, and retries an unknown
outcome with the request's Idempotency-Key like every write of the soak
(`Soak.put`). Its token grows: a new one is drawn from the same ZooKeeper
source every TOKEN_EVERY seconds (the last one is kept while ZooKeeper is
down), so the fence checks against a moving mark; a request still carrying
the older token after the newer was accepted on its resource is refused
(409), which is the fence at work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Protocol

from fencegate.soak.history import Call
from lockclient import LockClientError
from lockclient.protocols import TokenSource

log = logging.getLogger("soak")

RESOURCES = 4  # resources per writer: its writes spread over them
TOKEN_EVERY = 1.0  # seconds between a writer's token draws


class Put(Protocol):
    def __call__(
        self, client: int, key: str, token: int, body: bytes, *, resource: str
    ) -> Awaitable[Call]: ...


class Writers:
    """`count` writers of `in_flight` concurrent requests each, until `stop` is set."""

    def __init__(
        self, *, put: Put, tokens: TokenSource, count: int, in_flight: int, prefix: str, stop: asyncio.Event
    ) -> None:
        self._put = put
        self._source = tokens
        self._count = count
        self._in_flight = in_flight
        self._prefix = prefix
        self._stop = stop
        self._tokens = [0] * count
        self._seq = [0] * count

    async def first_tokens(self) -> None:
        """Draw every writer's first token (ZooKeeper is up at the start: a failure here is one)."""
        for writer in range(self._count):
            self._tokens[writer] = await self._source.next_token(self._resource(writer, 0))

    def _resource(self, writer: int, seq: int) -> str:
        return f"{self._prefix}w{writer}-r{seq % RESOURCES}"

    async def run(self) -> None:
        """Write until `stop`; every started write gets its answer or its retry deadline."""
        refresh = [asyncio.create_task(self._draw(w)) for w in range(self._count)]
        try:
            await asyncio.gather(*(self._lane(w) for w in range(self._count) for _ in range(self._in_flight)))
        finally:
            for task in refresh:  # a draw may hang on a restarting ZooKeeper: nothing waits for it
                task.cancel()
            await asyncio.gather(*refresh, return_exceptions=True)

    async def _draw(self, writer: int) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), TOKEN_EVERY)
            if self._stop.is_set():
                return
            try:
                self._tokens[writer] = await self._source.next_token(self._resource(writer, 0))
            except (LockClientError, OSError, TimeoutError) as exc:
                log.info("writer %d keeps token %d: %s", writer, self._tokens[writer], exc)

    async def _lane(self, writer: int) -> None:
        while not self._stop.is_set():
            seq = self._seq[writer] = self._seq[writer] + 1
            token = self._tokens[writer]
            body = f"w{writer} s{seq} t{token}".encode()
            key = f"{self._prefix}w{writer}-k{seq}"
            await self._put(writer, key, token, body, resource=self._resource(writer, seq))
