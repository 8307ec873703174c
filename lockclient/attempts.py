"""The attempt loop of an acquire: Redlock's steps 1-4 and 9-10, again until granted or given up.

Each attempt draws a token first (step 10: whoever stalls holds the older
one), sends `SET key value NX PX ttl` to every master at once, and grants a
`Lease` only with a quorum and validity left, measured from before the draw.
A refused attempt is undone wherever the value may have landed (step 4); a
cancelled one too, shielded from a second cancellation. Between attempts the
loop waits for a release message (step 9) or backs off while no quorum
answers; contention ends in `LockNotAcquired`, an outage in
`QuorumUnavailable`. `Redlock` owns the bookkeeping around it (re-entry,
the watchdog, stopping acquires on `aclose()`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Hashable, Sequence
from typing import Generic, cast

from lockclient import _nodes
from lockclient._nodes import Master, release_channel
from lockclient._notify import Notifier, Watch
from lockclient._quorum import (
    NodeAnswers,
    NotGranted,
    display_url,
    drift,
    failed_masters,
    fan_out,
    tally,
    validity,
)
from lockclient.config import RedlockSettings
from lockclient.errors import LockNotAcquired, QuorumUnavailable, TokenSourceError
from lockclient.lease import Lease, TokenT, lock_value
from lockclient.observe import Events
from lockclient.options import OnLost
from lockclient.protocols import Clock, TokenSource
from lockclient.renewal import ms
from lockclient.transport.fanout import Outcome

__all__ = ["AttemptLoop"]


class AttemptLoop(Generic[TokenT]):
    """The attempts of one Redlock's acquires, over its masters, token source and clock."""

    def __init__(
        self,
        masters: Sequence[Master],
        urls: Sequence[str],
        *,
        quorum: int,
        settings: RedlockSettings,
        tokens: TokenSource | None,
        clock: Clock,
        events: Events,
        notifier: Notifier,
    ) -> None:
        self._masters = list(masters)
        self._urls = tuple(urls)
        self.quorum = quorum
        self.settings = settings
        self._tokens = tokens
        self._clock = clock
        self._events = events
        self._notifier = notifier

    def key(self, resource: str) -> str:
        """The Redis key that holds `resource`'s lock on every master."""
        return self.settings.key_prefix + resource

    async def run(
        self,
        resource: str,
        ttl: float,
        blocking: bool,
        timeout: float | None,  # noqa: ASYNC109 - the wait bounds many attempts and their pauses
        owner: Hashable,
        on_lost: OnLost[TokenT] | None,
    ) -> Lease[TokenT]:
        began = self._clock()
        deadline = math.inf if timeout is None else began + timeout
        retry = self.settings.retry
        attempts = 0
        outage_since = math.inf  # when the current run of attempts that no quorum answered began
        outages = 0
        watch: Watch | None = None
        drawn_at = began
        try:
            while True:
                attempts += 1
                if attempts > 1:
                    drawn_at = self._clock()
                # Step 10: a fresh token before every attempt, so whoever stalls holds the older one
                token = await self._draw(resource, began, deadline, attempts)
                value = lock_value(token)
                if watch is not None:
                    watch.arm(value)
                result = await self._attempt(resource, token, drawn_at, value, ttl, owner, on_lost)
                if isinstance(result, Lease):
                    self._events.acquired(result, began, attempts)
                    return result
                now = self._clock()
                unreachable = result.tally.unreachable()
                outage_since = min(outage_since, drawn_at) if unreachable else math.inf
                outages = outages + 1 if unreachable else 0
                left = deadline - now
                if (
                    not blocking or left <= 0 or attempts == retry.attempts
                    or (unreachable and now - outage_since >= retry.unreachable)
                ):  # fmt: skip
                    raise self._refusal(resource, result, began, attempts, outage_since)
                held = result.tally.held_elsewhere()
                self._events.retried(
                    resource, "unreachable" if unreachable else "held" if held else "split", result.failed
                )
                if unreachable:  # nothing to wait for but the masters: back off, no subscription
                    budget = outage_since + retry.unreachable - now
                    await asyncio.sleep(max(0.0, min(retry.backoff(outages - 1), left, budget)))
                elif watch is None:
                    # Step 9: subscribe, then try again at once so a release before the
                    # subscription took effect is not missed.
                    # The wait for the masters' confirmation is part of the acquire's `timeout`: a
                    # master that accepts a connection and never answers confirms nothing.
                    watch = await self._notifier.watch(release_channel(self.key(resource)), within=left)
                    watch.own.add(value.encode())
                else:
                    await watch.wait(min(retry.poll if held else retry.backoff(), left))
                if deadline != math.inf and self._clock() >= deadline:
                    # Every wait above (backoff, subscription, release message) is cut at the deadline.
                    # One that reached it leaves no time for another attempt (nor for its token draw,
                    # which would fail at once and blame a healthy source): the answer is the last
                    # attempt's, an outage or contention as it was.
                    raise self._refusal(resource, result, began, attempts, outage_since)
        finally:
            if watch is not None:
                await self._notifier.unwatch(watch)

    async def _draw(self, resource: str, began: float, deadline: float, attempts: int) -> TokenT:
        """The next token, within what is left of the acquire's `timeout`: the draw is part of it."""
        if self._tokens is None:
            return cast(TokenT, None)
        scope = asyncio.timeout(None if deadline == math.inf else max(0.0, deadline - self._clock()))
        try:
            async with scope:
                return cast(TokenT, await self._tokens.next_token(resource))
        except TokenSourceError as exc:  # no lease can be had while the source fails: an outage
            self._events.not_acquired(resource, began, attempts, unreachable=False)
            self._events.unavailable(exc, resource)
            raise
        except TimeoutError as exc:
            if not scope.expired():  # the source's own timeout, not the acquire's
                raise
            self._events.not_acquired(resource, began, attempts, unreachable=False)
            error = LockNotAcquired(
                f"could not lock {resource!r} within the timeout: the token source "
                f"({type(self._tokens).__name__}) had not issued a token for attempt {attempts} when it "
                "ran out; check the source, or raise timeout",
                resource=resource,
            )
            self._events.unavailable(error, resource)
            raise error from exc

    def _refusal(
        self, resource: str, result: NotGranted, began: float, attempts: int, outage_since: float
    ) -> LockNotAcquired:
        """What the last attempt said, when no more attempts are made: `QuorumUnavailable` if no
        quorum could answer it (an outage since `outage_since`), else `LockNotAcquired`."""
        if result.tally.unreachable():
            return self._unavailable(resource, result, began, attempts, self._clock() - outage_since)
        return self._not_acquired(resource, result, began, attempts)

    def _not_acquired(
        self, resource: str, result: NotGranted, began: float, attempts: int
    ) -> LockNotAcquired:
        self._events.masters_failed(resource, result.failed)
        self._events.not_acquired(resource, began, attempts, unreachable=False)
        return LockNotAcquired(
            f"could not lock {resource!r} after {attempts} attempt(s): {result.summary}; "
            "per-node reasons are in .reasons (raise timeout, or check the masters)",
            resource=resource,
            reasons=result.nodes,
        )

    def _unavailable(
        self, resource: str, result: NotGranted, began: float, attempts: int, outage: float
    ) -> QuorumUnavailable:
        self._events.masters_failed(resource, result.failed)
        self._events.not_acquired(resource, began, attempts, unreachable=True)
        down = ", ".join(display_url(url) for url in result.failed)
        error = QuorumUnavailable(
            f"could not lock {resource!r}: {len(result.failed)} of {len(self._urls)} masters did not "
            f"answer ({attempts} attempt(s) over {outage:.1f}s), so no quorum ({self.quorum}) could grant "
            f"it: {down} (e.g. {result.nodes[result.failed[0]]}). This is an outage, not contention: start "
            "those masters or fix the network to them, or wait longer for them with "
            f"RetryPolicy(unreachable=SECONDS) (now {self.settings.retry.unreachable:g}); per-master reasons "
            "are in .reasons",
            resource=resource,
            reasons=result.nodes,
            unreachable=tuple(display_url(url) for url in result.failed),
        )
        self._events.unavailable(error, resource)
        return error

    async def _attempt(
        self,
        resource: str,
        token: TokenT,
        drawn_at: float,
        value: str,
        ttl: float,
        owner: Hashable,
        on_lost: OnLost[TokenT] | None,
    ) -> Lease[TokenT] | NotGranted:
        key = self.key(resource)
        ttl_ms = ms(ttl)
        # Validity runs from before the token was drawn: a client that stalls between the draw
        # and the quorum must find its lease already spent, not start a fresh one with an older
        # token than a holder that came and went meanwhile (the spin model's late-clock variant).
        start = drawn_at
        try:
            command = _nodes.set_nx(key, value, ttl_ms)
            outcomes = await fan_out(
                [m.send(command) for m in self._masters],
                self.settings.node_timeout,
                need=self.quorum,
            )
        except BaseException:  # cancelled mid-attempt: some masters may already hold our value
            await self.undo(key, value, self._masters)
            raise
        end = self._clock()
        elapsed = end - start
        allowance = drift(ttl, self.settings.drift_factor)
        left = validity(ttl, elapsed, allowance)
        counts = tally(outcomes)
        nodes = NodeAnswers(self._urls, outcomes, self.settings.node_timeout)
        if counts.grants(left):
            deadline = start + ttl - allowance  # == end + validity, measured from before the draw
            return Lease(
                resource=resource, token=token, key=key, value=value, ttl=ttl, deadline=deadline,
                drawn_at=drawn_at, granted_at=end, nodes=nodes, clock=self._clock, owner=owner,
                on_lost=on_lost,
            )  # fmt: skip
        # Step 4: undo wherever the value may have landed (a master yet to answer may); a master
        # that refused never held it. Each connection is ordered, so the undo follows the SET, and
        # once it is answered so is the SET: the refusal reports every master's answer.
        await self.undo(
            key, value, [m for m, o in zip(self._masters, outcomes, strict=True) if o is not False]
        )
        counts = tally(outcomes)  # the undo was queued behind each SET: every master has answered by now
        return NotGranted(
            counts, dict(nodes), self.quorum, failed=failed_masters(self._urls, outcomes),
            elapsed=elapsed, ttl=ttl, validity_left=left,
        )  # fmt: skip

    async def undo(
        self, key: str, value: str, masters: Sequence[Master], *, need: int | None = None
    ) -> list[Outcome[bool]]:
        """Compare-and-delete on `masters`; shielded so a second cancellation cannot leave keys behind.

        With `need`, return once `need` masters deleted it or too many said "not yours" for that
        (errors do not count against: their keys expire); the others still get the delete.
        """
        if not masters:
            return []
        command = _nodes.release(key, value)
        return await fan_out(
            [m.send(command) for m in masters], self.settings.node_timeout,
            need=need, errors_count=False, shielded=True,
        )  # fmt: skip
