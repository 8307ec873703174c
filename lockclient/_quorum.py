"""Quorum fan-out and the Redlock validity arithmetic.

`fan_out` sends one call to every master at once and returns each node's
result or error: a slow or failed node never cancels its siblings, each node
costs at most the per-node timeout (Redlock step 2), and once a quorum has
settled the outcome the slowest masters are not waited for. The arithmetic is
pure so property tests can cover it without servers (step 3):

    quorum   = N // 2 + 1
    drift    = ttl * drift_factor + 2 ms
    validity = ttl - elapsed - drift          (a grant needs quorum and validity > 0)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

from lockclient.transport.connection import Reply
from lockclient.transport.fanout import Batch, Outcome, Pending, current

__all__ = [
    "DRIFT_CONSTANT",
    "NodeAnswers",
    "NotGranted",
    "Tally",
    "display_url",
    "drift",
    "failed_masters",
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


def tally(outcomes: Sequence[Outcome[object]]) -> Tally:
    """Count one fan-out's answers as known now: True granted, False refused, an exception failed, and
    `Pending` not yet (a `Pending` whose answer has landed since counts as that answer)."""
    granted = refused = pending = 0
    for outcome in outcomes:
        if isinstance(outcome, Pending):
            outcome = outcome.now()
        if outcome is True:
            granted += 1
        elif outcome is False:
            refused += 1
        elif isinstance(outcome, Pending):
            pending += 1
    failed = len(outcomes) - granted - refused - pending
    return Tally(granted=granted, refused=refused, failed=failed, pending=pending)


@dataclass(frozen=True, slots=True)
class Tally:
    """How the masters answered one fan-out: granted, refused (someone else's key), failed, and
    pending (not answered yet when the outcome was already settled)."""

    granted: int
    refused: int
    failed: int
    pending: int = 0

    @property
    def nodes(self) -> int:
        return self.granted + self.refused + self.failed + self.pending

    def has_quorum(self) -> bool:
        return self.granted >= quorum(self.nodes)

    def held_elsewhere(self) -> bool:
        """A majority refused: another owner holds the lock, retrying before it goes is useless."""
        return self.refused >= quorum(self.nodes)

    def unreachable(self) -> bool:
        """So many masters failed (no answer, refused connection, reset, error reply) that no quorum
        could have answered: an outage, not contention."""
        return self.failed > self.nodes - quorum(self.nodes)

    def disproves(self) -> bool:
        """So many masters answered "not yours" that no quorum can hold the value: proof of loss."""
        return self.refused > self.nodes - quorum(self.nodes)

    def grants(self, validity_left: float) -> bool:
        """Redlock step 3: a quorum answered yes and time is left to use the lease."""
        return self.has_quorum() and validity_left > 0


class NotGranted:
    """Why one attempt was not granted: the tally, each master's answer, the masters that failed, and
    a sentence."""

    __slots__ = ("failed", "nodes", "summary", "tally")

    def __init__(
        self,
        tally: Tally,
        nodes: dict[str, str],
        quorum: int,
        *,
        failed: tuple[str, ...],
        elapsed: float,
        ttl: float,
        validity_left: float,
    ) -> None:
        self.tally = tally
        self.nodes = nodes
        # as `nodes` names them (`display_url`), so `nodes[failed[0]]` finds that master's answer
        self.failed = tuple(display_url(url) for url in failed)
        if tally.has_quorum():
            self.summary = (
                f"a quorum answered but the attempt took {elapsed * 1000:.1f} ms of a {ttl}s TTL "
                f"(validity {validity_left * 1000:.1f} ms <= 0), so it was released everywhere"
            )
        else:
            self.summary = (
                f"{tally.granted} of {tally.nodes} masters granted it, a quorum is {quorum} "
                f"({tally.refused} held by another owner, {tally.failed} failed or timed out"
                + (f", {tally.pending} had not answered yet" if tally.pending else "")
                + ")"
            )


def reason(outcome: Outcome[object], timeout: float) -> str:
    """One node's answer in words, as known now, for `LockNotAcquired.reasons` and `Lease.nodes`."""
    outcome = current(outcome)
    if isinstance(outcome, Pending):
        return "no answer yet: the outcome was settled by the others"
    if isinstance(outcome, TimeoutError):
        return f"no answer within {timeout * 1000:.0f} ms"
    if isinstance(outcome, BaseException):
        return f"{type(outcome).__name__}: {outcome}"
    return "ok" if outcome else "refused: held by another owner"


class NodeAnswers(Mapping[str, str]):
    """Each master's answer in words, worked out only when read: the hot path just keeps the outcomes.

    Keyed by each master's `display_url`: these answers end up in `repr(lease)`, `Lease.nodes` and
    `LockNotAcquired.reasons`, which get logged, so they never show a password. A master's full URL
    (as given to the `Redlock`) finds its answer too."""

    __slots__ = ("_outcomes", "_per_node", "_urls")

    def __init__(self, urls: Sequence[str], outcomes: Sequence[Outcome[object]], per_node: float) -> None:
        self._urls = urls
        self._outcomes = outcomes
        self._per_node = per_node

    def __getitem__(self, url: str) -> str:
        if url in self._urls:
            index = self._urls.index(url)
        else:
            shown = [display_url(given) for given in self._urls]
            if url not in shown:
                raise KeyError(url)
            index = shown.index(url)
        return reason(self._outcomes[index], self._per_node)

    def __iter__(self) -> Iterator[str]:
        return (display_url(url) for url in self._urls)

    def __len__(self) -> int:
        return len(self._urls)

    def __repr__(self) -> str:
        return repr(dict(self))


def failed_masters(urls: Sequence[str], outcomes: Sequence[Outcome[object]]) -> tuple[str, ...]:
    """The masters whose outcome is an error (no answer in time, a lost connection, an error reply), as
    known now: one still pending counts once its answer has landed."""
    return tuple(
        url
        for url, outcome in zip(urls, outcomes, strict=True)
        if isinstance(current(outcome), BaseException)
    )


def display_url(url: str) -> str:
    """A master's URL without its credentials, for messages, logs and metric labels."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


def _expire(tasks: list[asyncio.Task[T]]) -> None:
    for task in tasks:
        if not task.done():
            task.cancel()


def fan_out(
    calls: Sequence[Awaitable[T]],
    per_node: float,
    *,
    need: int | None = None,
    errors_count: bool = True,
    shielded: bool = False,
) -> Awaitable[list[Outcome[T]]]:
    """Wait for the calls concurrently, each for at most `per_node` seconds; errors are returned, not raised.

    With `need` (a quorum), return once the outcome is settled: `need` calls
    answered True, or too many did not (False, or an error when
    `errors_count`) for `need` to be reached. Calls still out are then a
    `Pending` in the list, through which their answers are read once they
    land; they still expire at `per_node`. Without `need`, or for awaitables
    other than the masters' replies, wait for every call.

    One node's error never cancels the others, whose answers still count
    toward the quorum. The masters' commands are replies already in flight:
    they are waited for as one `Batch`, a single future (no task and no
    callback per node). Anything else is wrapped in a task and gathered. One
    timer ends whatever is still pending at the deadline (cheaper than a
    timeout scope per node); those nodes are reported as `TimeoutError`.

    With `shielded`, the caller's cancellation stops only its wait: every
    call still runs to its answer or its timeout (an undo must reach the
    masters even if its caller is cancelled again).
    """
    if calls and all(isinstance(call, Reply) for call in calls):
        replies = cast(Sequence[Reply[T]], calls)
        return Batch(replies, per_node, need=need, errors_count=errors_count, shielded=shielded)
    gathered = _gather(calls, per_node)
    return asyncio.shield(gathered) if shielded else gathered


async def _gather(calls: Sequence[Awaitable[T]], per_node: float) -> list[Outcome[T]]:
    loop = asyncio.get_running_loop()
    tasks = [asyncio.ensure_future(call) for call in calls]
    timer = loop.call_later(per_node, _expire, tasks)
    try:
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        timer.cancel()
    return [TimeoutError() if isinstance(r, asyncio.CancelledError) else r for r in results]
