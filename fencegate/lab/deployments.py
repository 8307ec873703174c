"""The real parts plugged into the lab's `Deployment`: Redlock or a lab lock, and the gateway.

`Locks` is the lock half, the same whatever store holds the counter (the
gateway here, a user's SQL table in `lab.sql_deployment`).
`GatewayDeployment` names, for one mode and lock design, what each client
process builds:

| mode | lock | store |
|---|---|---|
| `lock-only` | the design, no token | the gateway, every write with one constant token (the check is moot) |
| `fenced` | the design, a token drawn before each attempt | the gateway, reads and writes fenced |
| `fence-only` | no lock: a token per iteration | the gateway, reads and writes fenced |

The etcd design is its own token source: in `fenced` mode its lease carries
its lock key's create revision, and `tokens` (the same etcd cluster's URL)
serves only the seed write and `fence-only`.

Token sources are URLs (`lockclient.open_token_source`); `INCR` stands for
the redis the scenario provides (an untouched node, or in token-regress the
lock node that restarts), read with `?unsafe=1`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from fencegate.lab.errors import LabError
from fencegate.lab.gateway_store import UNFENCED_TOKEN, GatewayCounter
from fencegate.lab.predictions import INCR
from fencegate.lab.protocols import Component
from lockclient import open_token_source

Mode = Literal["lock-only", "fenced", "fence-only"]
MODES: tuple[Mode, ...] = ("lock-only", "fenced", "fence-only")
DESIGNS = ("redlock", "single", "setnx-getset", "etcd")
ETCD = "etcd"  # the design whose lock lives on the session's etcd cluster, not on redis nodes
REDLOCK_NODES = 5
LAB_LOCKS = {
    "single": "fencegate.lab.locks:SingleLock",
    "setnx-getset": "fencegate.lab.locks:SetnxGetsetLock",
}


@dataclass(frozen=True)
class Locks:
    """The lock half of a deployment: one mode and lock design, whatever store the counter lives in."""

    mode: Mode
    design: str
    tokens: str | None = None  # a token source URL, or INCR; None only in lock-only mode
    lock_url: str | None = None  # the etcd design's cluster (etcd://...); redis nodes are per run

    def __post_init__(self) -> None:
        if self.design not in DESIGNS:
            raise LabError(f"unknown lock design {self.design!r}: use one of {', '.join(DESIGNS)}")
        if self.design == ETCD and self.lock_url is None:
            raise LabError("the etcd lock design needs its cluster: give lock_url=etcd://HOST:PORT,...")
        if self.mode != "lock-only" and self.tokens is None:
            raise LabError(f"{self.mode} mode draws tokens: give a token source URL (or {INCR!r})")

    @property
    def lock_nodes(self) -> int:
        return {"redlock": REDLOCK_NODES, ETCD: 0}.get(self.design, 1)

    def _source(self, incr_url: str) -> str | None:
        if self.mode == "lock-only":
            return None
        return f"{incr_url}?unsafe=1" if self.tokens == INCR else self.tokens

    def lock(self, urls: Sequence[str], *, tokens: str) -> Component:
        source = self._source(tokens)
        if self.mode == "fence-only":
            return Component("fencegate.lab.leases:token_only", {"tokens": source})
        if self.design == ETCD:
            return Component(
                "fencegate.lab.etcd_lock:etcd_lock", {"url": self.lock_url, "tokens": self.mode == "fenced"}
            )
        if self.design == "redlock":
            return Component("fencegate.lab.leases:redlock", {"urls": list(urls), "tokens": source})
        if source is None:
            return Component(LAB_LOCKS[self.design], {"url": urls[0]})
        return Component(
            "fencegate.lab.leases:tokened", {"design": self.design, "url": urls[0], "tokens": source}
        )


@dataclass(frozen=True)
class GatewayDeployment:
    """One mode and lock design against one running gateway; `key` and `resource` fresh per run."""

    mode: Mode
    design: str
    gateway: tuple[str, int]
    key: str
    resource: str
    tokens: str | None = None  # a token source URL, or INCR; None only in lock-only mode
    lock_url: str | None = None  # the etcd design's cluster (etcd://...); redis nodes are per run
    proxied: bool = False  # the gateway proxies to an upstream: no Idempotency-Key (lab.gateway_store)

    def __post_init__(self) -> None:
        Locks(self.mode, self.design, self.tokens, self.lock_url)  # refuses a mode, design or source

    @property
    def locks(self) -> Locks:
        return Locks(self.mode, self.design, self.tokens, self.lock_url)

    @property
    def lock_nodes(self) -> int:
        return self.locks.lock_nodes

    @property
    def store_address(self) -> tuple[str, int]:
        return self.gateway

    def lock(self, urls: Sequence[str], *, tokens: str) -> Component:
        return self.locks.lock(urls, tokens=tokens)

    def store(self, address: tuple[str, int]) -> Component:
        kwargs = {
            "url": f"http://{address[0]}:{address[1]}",
            "key": self.key,
            "resource": self.resource,
            "fenced": self.mode != "lock-only",
        }
        return Component("fencegate.lab.gateway_store:counter", kwargs)

    def _counter(self) -> GatewayCounter:
        url = f"http://{self.gateway[0]}:{self.gateway[1]}"
        return GatewayCounter(url, key=self.key, resource=self.resource, fenced=False, proxied=self.proxied)

    async def seed(self) -> None:
        """Create the counter at 0 before the run, so every read finds it.

        With a token source, the seed write carries a token drawn from it, so a gateway that guards
        against tokens from the future (a deployment's, started with --tokens) accepts it too.
        """
        token = UNFENCED_TOKEN
        if self.tokens is not None and self.tokens != INCR:
            source = open_token_source(self.tokens)
            try:
                token = await source.next_token(self.resource)
            finally:
                await source.aclose()
        counter = self._counter()
        try:
            await counter.seed(token)
        finally:
            await counter.aclose()

    async def final(self) -> int:
        counter = self._counter()
        try:
            return await counter.final()
        finally:
            await counter.aclose()


__all__ = ["DESIGNS", "ETCD", "INCR", "MODES", "GatewayDeployment", "Locks", "Mode"]
