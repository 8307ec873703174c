"""The lab's counter behind a gateway replica whose upstream is an S3 store: `CounterStore`.

The requests are the gateway counter's (`lab.gateway_store`): one object,
fenced reads and writes, a refusal (409) a reply. What differs is `seq`, the
store's acceptance order: an S3 store keeps no counter of the writes it
applied, and the gateway's s3 mode answers without a version. So a write's
`seq` is the CLOCK_MONOTONIC instant (ns) its 2xx reached the client: the
store applied the write between its send and that instant, and in the
scenario that runs this store (`proxy-delay`) a held write is applied, and
answered, only after the challenger's write was answered, so answer order is
the order the store took them. Two writes answered within one clock tick
would be ordered arbitrarily; the lost-update verdict does not depend on it,
since the final value is read from the store itself (`lab.proxy_deployment`).
"""

from __future__ import annotations

import time
from dataclasses import replace

from fencegate.lab.gateway_store import GatewayCounter
from fencegate.lab.protocols import LeaseInfo, StoreReply


class ProxyCounter:
    """The shared counter through one gateway replica in front of an S3 store."""

    def __init__(self, url: str, *, key: str, resource: str) -> None:
        self._counter = GatewayCounter(url, key=key, resource=resource, fenced=True, proxied=True)

    async def read(self, lease: LeaseInfo) -> StoreReply:
        return await self._counter.read(lease)

    async def write(self, value: int, lease: LeaseInfo) -> StoreReply:
        reply = await self._counter.write(value, lease)
        if reply.outcome != "ok" or reply.seq is not None:
            return reply
        return replace(reply, seq=time.monotonic_ns())

    async def final(self) -> int:
        return await self._counter.final()

    async def aclose(self) -> None:
        await self._counter.aclose()


def counter(url: str, key: str, resource: str) -> ProxyCounter:
    """The factory a client process names (`lab.proxy_store:counter`)."""
    return ProxyCounter(url, key=key, resource=resource)


__all__ = ["ProxyCounter", "counter"]
