"""What a `Redlock` tells the outside: `logging` records on every state change, and an optional observer.

Every acquire, release, renewal, failed renewal and loss is
logged on the `lockclient` logger with `resource` and `token` as record
attributes (`extra`), so a formatter can print them (`%(resource)s`) and a
structured handler can index them. Routine changes (acquired, released,
renewed) are DEBUG; trouble (a renewal that failed and is retried, a lost
lease, an unreachable quorum or token source) is WARNING.

An `Observer` (for metrics) gets the same events with numbers: acquire
latency and attempts, retries and their reason, which masters failed. It is
optional and costs nothing when absent: the `Redlock` checks for it once per
event, and per-master failures are worked out only for an observer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from lockclient._quorum import display_url

if TYPE_CHECKING:
    from lockclient.lease import Lease

__all__ = ["Events", "Observer", "Retry", "log"]

log = logging.getLogger("lockclient")

# Why an acquire tried again: the lock is held elsewhere, nobody got a quorum (a split vote), or a
# majority of masters did not answer.
Retry = Literal["held", "split", "unreachable"]


class Observer(Protocol):
    """Receives a `Redlock`'s events; every method must return quickly and never raise.

    Methods are called on the event loop. `resource` names are the callers'
    own: keep them out of metric labels unless their number is bounded.
    """

    def acquired(self, resource: str, token: int | None, *, seconds: float, attempts: int) -> None:
        """A lease was granted after `attempts` attempts, `seconds` after acquire() was called."""

    def not_acquired(self, resource: str, *, seconds: float, attempts: int, unreachable: bool) -> None:
        """acquire() gave up: timeout, attempts used up, or (`unreachable`) the quorum did not answer."""

    def retried(self, resource: str, *, reason: Retry) -> None:
        """An attempt failed and another follows."""

    def masters_failed(self, resource: str, masters: Sequence[str]) -> None:
        """These masters (URLs without credentials) did not answer an attempt, a renewal or a release."""

    def renewed(self, resource: str, token: int | None) -> None:
        """A renewal (watchdog or extend()) was confirmed by a quorum."""

    def renewal_failed(self, resource: str, token: int | None) -> None:
        """A renewal round got no quorum; it is retried until the lease's validity runs out."""

    def lost(self, resource: str, token: int | None) -> None:
        """The lease is lost: validity over without a renewal, or proof another value holds the quorum."""

    def released(self, resource: str, token: int | None, *, held: float) -> None:
        """The lease was released after `held` seconds."""


class Events:
    """One `Redlock`'s reports: a log record for every state change, and the observer's call if it has one.

    Routine records are made only when DEBUG is on for the `lockclient`
    logger, and per-master failures are listed only for an observer: with
    neither, an acquire and a release cost two cheap checks each.
    """

    __slots__ = ("clock", "observer")

    def __init__(self, observer: Observer | None, clock: Callable[[], float]) -> None:
        self.observer = observer
        self.clock = clock

    def acquired(self, lease: Lease[Any], began: float, attempts: int) -> None:
        if self.observer is not None:
            self.observer.acquired(
                lease.resource, lease.token, seconds=self.clock() - began, attempts=attempts
            )
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "acquired %r token %s after %d attempt(s), valid %.3fs",
                lease.resource, lease.token, attempts, lease.remaining(), extra=_fields(lease),
            )  # fmt: skip

    def not_acquired(self, resource: str, began: float, attempts: int, *, unreachable: bool) -> None:
        if self.observer is not None:
            seconds = self.clock() - began
            self.observer.not_acquired(resource, seconds=seconds, attempts=attempts, unreachable=unreachable)

    def unavailable(self, error: Exception, resource: str) -> None:
        log.warning("%s", error, extra={"resource": resource, "token": None})

    def retried(self, resource: str, reason: Retry, failed: Sequence[str]) -> None:
        if self.observer is not None:
            self.masters_failed(resource, failed)
            self.observer.retried(resource, reason=reason)

    def masters_failed(self, resource: str, failed: Sequence[str]) -> None:
        if self.observer is not None and failed:
            self.observer.masters_failed(resource, [display_url(url) for url in failed])

    def renewed(self, lease: Lease[Any]) -> None:
        if self.observer is not None:
            self.observer.renewed(lease.resource, lease.token)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "renewed %r token %s, valid %.3fs", lease.resource, lease.token, lease.remaining(),
                extra=_fields(lease),
            )  # fmt: skip

    def renewal_failed(self, lease: Lease[Any], why: str, failed: Sequence[str]) -> None:
        if self.observer is not None:
            self.masters_failed(lease.resource, failed)
            self.observer.renewal_failed(lease.resource, lease.token)
        log.warning(
            "renewing %r (token %s) got no quorum (%s); retrying, %.3fs of validity left",
            lease.resource, lease.token, why, lease.remaining(), extra=_fields(lease),
        )  # fmt: skip

    def lost(self, lease: Lease[Any], why: str) -> None:
        if self.observer is not None:
            self.observer.lost(lease.resource, lease.token)
        log.warning(
            "lost the lease on %r (token %s): %s", lease.resource, lease.token, why, extra=_fields(lease)
        )

    def released(self, lease: Lease[Any]) -> None:
        if self.observer is not None:
            self.observer.released(lease.resource, lease.token, held=self.clock() - lease.granted_at)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("released %r token %s", lease.resource, lease.token, extra=_fields(lease))


def _fields(lease: Lease[Any]) -> dict[str, Any]:
    return {"resource": lease.resource, "token": lease.token}
