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
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "DRIFT_CONSTANT",
    "NodeAnswers",
    "Refusal",
    "Tally",
    "drift",
    "fan_out",
    "quorum",
    "reason",
    "tally",
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


def tally(outcomes: Sequence[object]) -> Tally:
    """Count one fan-out's answers: True granted, False refused, an exception failed."""
    granted = refused = 0
    for outcome in outcomes:
        if outcome is True:
            granted += 1
        elif outcome is False:
            refused += 1
    return Tally(granted=granted, refused=refused, failed=len(outcomes) - granted - refused)


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


class Refusal:
    """Why one attempt was not granted: the tally, each master's answer, and a sentence."""

    __slots__ = ("nodes", "summary", "tally")

    def __init__(
        self,
        tally: Tally,
        nodes: dict[str, str],
        quorum: int,
        *,
        elapsed: float,
        ttl: float,
        validity_left: float,
    ) -> None:
        self.tally = tally
        self.nodes = nodes
        if tally.has_quorum():
            self.summary = (
                f"a quorum answered but the attempt took {elapsed * 1000:.1f} ms of a {ttl}s TTL "
                f"(validity {validity_left * 1000:.1f} ms <= 0), so it was released everywhere"
            )
        else:
            self.summary = (
                f"{tally.granted} of {tally.nodes} masters granted it, a quorum is {quorum} "
                f"({tally.refused} held by another owner, {tally.failed} failed or timed out)"
            )


def reason(outcome: object, timeout: float) -> str:
    """One node's answer in words, for `LockNotAcquired.reasons` and `Lease.nodes`."""
    if isinstance(outcome, TimeoutError):
        return f"no answer within {timeout * 1000:.0f} ms"
    if isinstance(outcome, BaseException):
        return f"{type(outcome).__name__}: {outcome}"
    return "ok" if outcome else "refused: held by another owner"


class NodeAnswers(Mapping[str, str]):
    """Each master's answer in words, worked out only when read: the hot path just keeps the outcomes."""

    __slots__ = ("_outcomes", "_per_node", "_urls")

    def __init__(self, urls: Sequence[str], outcomes: Sequence[object], per_node: float) -> None:
        self._urls = urls
        self._outcomes = outcomes
        self._per_node = per_node

    def __getitem__(self, url: str) -> str:
        try:
            index = self._urls.index(url)
        except ValueError:
            raise KeyError(url) from None
        return reason(self._outcomes[index], self._per_node)

    def __iter__(self) -> Iterator[str]:
        return iter(self._urls)

    def __len__(self) -> int:
        return len(self._urls)


def _expire(tasks: list[asyncio.Task[T]]) -> None:
    for task in tasks:
        if not task.done():
            task.cancel()


async def fan_out(calls: Sequence[Coroutine[Any, Any, T]], per_node: float) -> list[T | BaseException]:
    """Run every call concurrently, each for at most `per_node` seconds; errors are returned, not raised.

    `gather(return_exceptions=True)` rather than a TaskGroup: one node's error
    must not cancel the others, whose answers still count toward the quorum.
    One timer cancels whatever is still running at the deadline (cheaper than
    a timeout scope per node); those nodes are reported as `TimeoutError`.
    """
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(call) for call in calls]
    timer = loop.call_later(per_node, _expire, tasks)
    try:
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        timer.cancel()
    return [TimeoutError() if isinstance(r, asyncio.CancelledError) else r for r in results]
