"""Quorum fan-out and the Redlock validity arithmetic.

`fan_out` sends one call to every master at once and returns each node's
result or error: a slow or failed node never cancels its siblings, and each
node costs at most the per-node timeout (Redlock step 2). The arithmetic is
pure so property tests can cover it without servers (step 3):

    quorum   = N // 2 + 1
    drift    = ttl * drift_factor + 2 ms
    validity = ttl - elapsed - drift          (a grant needs quorum and validity > 0)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "DRIFT_CONSTANT",
    "Tally",
    "drift",
    "fan_out",
    "quorum",
    "reason",
    "validity",
]

T = TypeVar("T")

# Redlock step 3: "add 2 milliseconds to the drift to account for Redis expires precision".
DRIFT_CONSTANT = 0.002


def quorum(nodes: int) -> int:
    """The smallest majority of `nodes`: any two quorums share at least one node."""
    return nodes // 2 + 1


def drift(ttl: float, factor: float) -> float:
    """Clock drift allowance for a key that lives `ttl` seconds."""
    return ttl * factor + DRIFT_CONSTANT


def validity(ttl: float, elapsed: float, drift_allowance: float) -> float:
    """Seconds a freshly granted lease may still be used; <= 0 means refused."""
    return ttl - elapsed - drift_allowance


@dataclass(frozen=True, slots=True)
class Tally:
    """How the masters answered one fan-out: granted, refused (someone else's key), failed."""

    granted: int
    refused: int
    failed: int

    @property
    def nodes(self) -> int:
        return self.granted + self.refused + self.failed

    def has_quorum(self) -> bool:
        return self.granted >= quorum(self.nodes)

    def held_elsewhere(self) -> bool:
        """A majority refused: another owner holds the lock, retrying before it goes is useless."""
        return self.refused >= quorum(self.nodes)

    def grants(self, validity_left: float) -> bool:
        """Redlock step 3: a quorum answered yes and time is left to use the lease."""
        return self.has_quorum() and validity_left > 0


def reason(outcome: object, timeout: float) -> str:
    """One node's answer in words, for `LockNotAcquired.reasons` and `Lease.nodes`."""
    if isinstance(outcome, TimeoutError):
        return f"no answer within {timeout * 1000:.0f} ms"
    if isinstance(outcome, BaseException):
        return f"{type(outcome).__name__}: {outcome}"
    return "ok" if outcome else "refused: held by another owner"


async def _bounded(call: Awaitable[T], seconds: float) -> T:
    async with asyncio.timeout(seconds):
        return await call


async def fan_out(calls: Sequence[Awaitable[T]], per_node: float) -> list[T | BaseException]:
    """Await every call concurrently, each under `per_node` seconds; errors are returned, not raised.

    `gather(return_exceptions=True)` rather than a TaskGroup: one node's error
    must not cancel the others, whose answers still count toward the quorum.
    """
    return await asyncio.gather(*(_bounded(call, per_node) for call in calls), return_exceptions=True)
