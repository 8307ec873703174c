"""Keeping a lease: renewal on a quorum that survives a bad moment, and the watchdog (Redlock steps 6, 7).

A renewal is the compare-and-pexpire script on every master, counted only
with a quorum confirmed before the lease's current validity ends; the
validity then restarts from before the request. A round without a quorum (a
master restarting, a slow network for a moment) is not a loss: it is
retried, backing off from `retry.delay`, until the validity runs out. The
lease is lost only when

- its validity (monotonic clock) is over without a confirmed round, or
- a round proves that no quorum holds its value any more: so many masters
  answered "not yours" (another value, or none) that the rest cannot make one.

Then the loss is recorded (`check()`, `wait_lost()`, `on_lost`, a log record,
the observer), what is left is released, and `LockLost` is raised. The
watchdog (`auto_extend`) renews every `ttl * watchdog_fraction`; it never
revives a lease whose validity has passed, even if the loop was blocked.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, NoReturn

from lockclient import _nodes
from lockclient._nodes import Master
from lockclient._quorum import Tally, drift, failed_masters, fan_out, tally
from lockclient.config import RedlockSettings, check_ttl
from lockclient.errors import LockLost
from lockclient.lease import EXPIRED, Lease, TokenT
from lockclient.observe import Events
from lockclient.protocols import Clock

__all__ = ["Renewals", "ms"]

Undo = Callable[[Lease[TokenT]], Awaitable[object]]


def ms(seconds: float) -> int:
    """Whole milliseconds for PX and PEXPIRE, rounded up, at least 1."""
    return max(1, math.ceil(seconds * 1000))


class Renewals(Generic[TokenT]):
    """One `Redlock`'s renewals and watchdog tasks."""

    def __init__(
        self,
        masters: Sequence[Master],
        urls: Sequence[str],
        *,
        quorum: int,
        settings: RedlockSettings,
        clock: Clock,
        events: Events,
        undo: Undo[TokenT],
    ) -> None:
        self._masters = masters
        self._urls = urls
        self._quorum = quorum
        self._settings = settings
        self._clock = clock
        self._events = events
        self._undo = undo
        self._watchdogs: dict[Lease[TokenT], asyncio.Task[None]] = {}

    async def renew(self, lease: Lease[TokenT], ttl: float) -> None:
        """Renew for `ttl` seconds; retried until confirmed or lost (see the module docstring)."""
        check_ttl(ttl, self._settings.node_timeout)
        command = _nodes.extend(lease.key, lease.value, ms(ttl))
        failures = 0
        last = ""
        while True:
            if lease.lost:  # the validity ran out (a blocked loop, failed rounds) or the lease was released
                why = lease.lost_reason or EXPIRED
                await self._lose(lease, f"{why} while renewals failed ({last})" if last else why)
            start = self._clock()
            outcomes = await fan_out(
                [m.send(command) for m in self._masters], self._settings.node_timeout, need=self._quorum
            )
            end = self._clock()
            counts = tally(outcomes)
            if counts.granted >= self._quorum:
                if end >= lease.deadline:
                    await self._lose(
                        lease, "the renewal was confirmed only after the lease's validity had run out"
                    )
                lease.deadline = start + ttl - drift(ttl, self._settings.drift_factor)
                lease.ttl = ttl
                self._events.renewed(lease)
                return
            last = _describe(counts)
            if counts.disproves():
                await self._lose(lease, f"{last}, so a quorum ({self._quorum}) can no longer hold it")
            lease.failed_renewals += 1
            self._events.renewal_failed(lease, last, failed_masters(self._urls, outcomes))
            pause = min(self._settings.retry.backoff(failures), lease.deadline - self._clock())
            failures += 1
            if pause > 0:
                await asyncio.sleep(pause)

    async def _lose(self, lease: Lease[TokenT], why: str) -> NoReturn:
        """Mark the lease lost (on_lost, log, observer), release what is left, raise `LockLost`."""
        if lease._mark_lost(why):
            self._events.lost(lease, why)
        await self._undo(lease)
        raise LockLost(
            f"could not renew the lease on {lease.resource!r} (token {lease.token}): {why}",
            resource=lease.resource,
            token=lease.token,
        )

    def watch(self, lease: Lease[TokenT]) -> None:
        """Start the watchdog of `lease`."""
        self._watchdogs[lease] = asyncio.create_task(self._watchdog(lease), name=f"watchdog {lease.resource}")

    async def _watchdog(self, lease: Lease[TokenT]) -> None:
        """Step 7: renew every `ttl * watchdog_fraction` until released or lost."""
        while True:
            # a fraction of the TTL, or of the validity left if less: a lease granted after a slow
            # token draw starts with less than its TTL
            await asyncio.sleep(min(lease.ttl, lease.remaining()) * self._settings.watchdog_fraction)
            try:
                await self.renew(lease, lease.ttl)
            except LockLost:
                return  # renew() marked it lost: the holder sees it via check(), on_lost or wait_lost()
            lease.renewals += 1

    async def stop(self, lease: Lease[TokenT]) -> None:
        """Stop the watchdog of `lease`, if it has one."""
        task = self._watchdogs.pop(lease, None)
        if task is not None:
            task.cancel()
            await asyncio.wait([task])  # unlike awaiting it, never swallows the caller's own cancellation

    async def aclose(self) -> None:
        for lease in list(self._watchdogs):
            await self.stop(lease)


def _describe(counts: Tally) -> str:
    why = f"{counts.granted} of {counts.nodes} masters confirmed it, {counts.refused} no longer held it"
    why += f", {counts.failed} failed" if counts.failed else ""
    return why + (f", {counts.pending} had not answered" if counts.pending else "")
