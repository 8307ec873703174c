"""A granted lease: what the holder may use, and for how long.

A lease is advisory. Its `remaining()` validity is measured on the holder's
monotonic clock from before the quorum was asked, minus the drift allowance,
so it errs on the short side; past it the lease must not be used. What makes
a write safe is the fencing token checked by the storage, not the lease.

Loss is sticky: once the validity runs out (no renewal confirmed in time)
or a renewal proves another value holds the quorum, `check()` raises
`LockLost` for good and `lost` is true. A renewal that merely fails (a
master restarting, a slow round) is retried until the validity runs out and
loses nothing. The `on_lost` callback (if any) is called once, on the event
loop, when Redlock learns of the loss (the watchdog or `extend()` giving up,
a release that found the lock gone); plain expiry without a watchdog is seen
by `check()`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

from lockclient._quorum import display_url
from lockclient.errors import LockLost
from lockclient.protocols import Clock

__all__ = ["Lease", "TokenT", "lock_value", "token_of"]

log = logging.getLogger(__name__)

TokenT = TypeVar("TokenT", bound=int | None)

# Redlock step 1: a random value unique per acquisition, so only its owner can release it.
RANDOM_BYTES = 20
EXPIRED = "the lease's validity ran out"
NO_TOKEN = "-"  # noqa: S105 - a placeholder in the lock value, not a secret


def lock_value(token: int | None) -> str:
    """`<token>:<40 hex digits>`: anyone reading the key sees which token holds it."""
    return f"{NO_TOKEN if token is None else token}:{os.urandom(RANDOM_BYTES).hex()}"


def token_of(value: str | bytes) -> int | None:
    """The token recorded in a lock value (None when the lease was taken without a source)."""
    text = value.decode() if isinstance(value, bytes) else value
    head = text.partition(":")[0]
    return None if head == NO_TOKEN else int(head)


class Lease(Generic[TokenT]):
    """One holder's claim on `resource`, with the token drawn for it.

    `Lease[int]` comes from a `Redlock` with a token source and satisfies the
    `Fenced` protocol; `Lease[None]` comes from one without.
    """

    def __init__(
        self,
        *,
        resource: str,
        token: TokenT,
        key: str,
        value: str,
        ttl: float,
        deadline: float,
        drawn_at: float,
        granted_at: float,
        nodes: Mapping[str, str],
        clock: Clock,
        owner: Hashable,
        on_lost: Callable[[Lease[TokenT]], object] | None = None,
    ) -> None:
        self._resource = resource
        self._token = token
        self.key = key
        self.value = value
        self.ttl = ttl
        self.deadline = deadline
        # when the token was asked for (it was issued after that) and when the quorum answered, on the
        # Redlock's clock: a token is drawn just before the attempt that carries it, never reused
        self.drawn_at = drawn_at
        self.granted_at = granted_at
        self.nodes = nodes
        self.owner = owner
        self.extensions = 0
        self.renewals = 0
        self.failed_renewals = 0  # renewal rounds without a quorum, each retried within the validity
        self.holds = 1
        self._clock = clock
        self._on_lost = on_lost
        self._lost_reason: str | None = None
        self._lost_event: asyncio.Event | None = None  # made when first awaited

    @property
    def resource(self) -> str:
        return self._resource

    @property
    def token(self) -> TokenT:
        return self._token

    @property
    def lost(self) -> bool:
        """True once the validity ran out, a renewal failed, or the lease was released."""
        return self._lost_reason is not None or self.deadline <= self._clock()

    @property
    def lost_reason(self) -> str | None:
        if self._lost_reason is None and self.deadline <= self._clock():
            return EXPIRED
        return self._lost_reason

    def remaining(self) -> float:
        """Seconds of validity left on the monotonic clock (0.0 once expired or lost)."""
        if self._lost_reason is not None:
            return 0.0
        return max(0.0, self.deadline - self._clock())

    def check(self) -> None:
        """Raise `LockLost` unless the lease is still valid; call it before each protected step.

        Reading the state never changes it, so any thread may call this (the sync facade's callers do).
        """
        reason = self.lost_reason
        if reason is not None:
            raise LockLost(
                f"the lease on {self._resource!r} (token {self._token}) is lost: {reason}; "
                "stop using it and acquire again",
                resource=self._resource,
                token=self._token,
            )

    async def wait_lost(self) -> None:
        """Return once the lease is lost: marked so (watchdog, release) or past its validity."""
        if self._lost_event is None:
            self._lost_event = asyncio.Event()
        while not self.lost:
            try:
                async with asyncio.timeout(self.remaining()):  # re-read: an extension moves the deadline
                    await self._lost_event.wait()
            except TimeoutError:
                pass

    def _mark_lost(self, reason: str, *, notify: bool = True) -> bool:
        """Record the end of the lease once, on the event loop; `notify=False` for an orderly release.

        True if this call ended it (so the caller reports it), False if it had ended already.
        """
        if self._lost_reason is not None:
            return False
        self._lost_reason = reason
        if self._lost_event is not None:
            self._lost_event.set()
        if notify and self._on_lost is not None:
            try:
                self._on_lost(self)
            except Exception:  # the holder's callback must not break the watchdog or the release
                log.exception("on_lost callback for %r raised", self._resource)
        return True

    def __repr__(self) -> str:
        reason = self.lost_reason
        state = f"lost: {reason}" if reason else f"valid {self.remaining():.3f}s of {self.ttl}s"
        masters = {display_url(url): answer for url, answer in self.nodes.items()}  # no password shown
        return f"<Lease {self._resource!r} token={self._token} {state} masters={masters!r}>"
