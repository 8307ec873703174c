"""One command to N masters, waited for as one batch: no task, no future and no callback per master.

A `Batch` gathers the `Reply` of each master. Awaiting it returns a list of
outcomes, one per master, in order, fixed at the moment the caller resumes:

- the converted reply (`True`/`False` for Redlock's commands): it answered.
- `Pending`: no answer yet, a quorum had settled the outcome without it (slow
  or hung).
- unreachable (`UNREACHABLE`): `TimeoutError` (no answer within the per-node
  timeout; its connection was dropped), `ConnectTimeout` (the connection did
  not open in time), `ConnectionRefusedError` (nothing listens: down),
  `ConnectionResetError` (the connection was lost: reset, or closed by the
  master), `ConnectionAbortedError` (this client dropped the connection
  under it: another request on it timed out, or the master broke the
  protocol).
- misconfigured: `TLSError` (the master's certificate: CA, expiry, host
  name; or the master refused ours), `AuthenticationError` (the master
  refused the URL's login or database).
- `ServerError`: an error reply.
- `ConnectionError`: anything else that kept the connection from opening
  (no route, a host name that does not resolve).

Each outcome is an answer or an exception instance, except `Pending`, a
handle on the request still out: `Pending.now()` is its answer once that has landed
(`current()` does it for any outcome). The list never changes after it was
returned; late answers are read through their `Pending`.

With `need`, the batch settles as soon as its outcome is: `need` replies
were True, or so many were not that `need` no longer can be (False only, or
also errors when `errors_count`): a quorum never waits on the slowest master.
After `per_node` seconds the replies still out expire (their connections are
dropped) and are reported as `TimeoutError`, whether or not the batch was
awaited to the end. A `shielded` batch outlives its caller's cancellation:
its requests are still sent (those queued behind a connection being opened
too) and read, as under `asyncio.shield`, without the extra loop iteration
that shield's own future costs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Sequence
from typing import Any, Generic, TypeVar, Union

from lockclient.transport.connection import UNSET, Reply
from lockclient.transport.errors import ConnectTimeout

__all__ = ["UNREACHABLE", "Batch", "Outcome", "Pending", "current"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

UNREACHABLE: tuple[type[BaseException], ...] = (
    TimeoutError,
    ConnectTimeout,
    ConnectionRefusedError,
    ConnectionResetError,
    ConnectionAbortedError,
)


class Pending(Generic[T_co]):
    """A master that had not answered when its fan-out returned: a quorum settled it without this one.

    Its request is still out (it still expires at the per-node timeout).
    `now()` is its outcome once it has landed, or this `Pending` until then.
    """

    __slots__ = ("_reply",)

    def __init__(self, reply: Reply[T_co]) -> None:
        self._reply = reply

    def now(self) -> Outcome[T_co]:
        outcome = self._reply.outcome
        return self if outcome is UNSET else outcome

    def __repr__(self) -> str:
        return "Pending"


Outcome = Union[T, BaseException, Pending[T]]  # noqa: UP007 - a generic alias needs Union before 3.12


def current(outcome: Outcome[T]) -> Outcome[T]:
    """`outcome` as known now: a `Pending` is replaced by its answer once that has landed."""
    return outcome.now() if isinstance(outcome, Pending) else outcome


class _Done(asyncio.Future[None]):
    """A batch's settling; cancelling it (its caller was cancelled) abandons the replies and the timer,
    unless the batch is shielded."""

    batch: Batch[Any] | None = None

    def cancel(self, msg: Any | None = None) -> bool:
        if not super().cancel(msg):
            return False
        if self.batch is not None and not self.batch.shielded:
            self.batch.abandon()
        return True


class Batch(Generic[T]):
    """Every reply of one fan-out, settled as one: `await batch` returns the outcomes (see the module)."""

    __slots__ = (
        "_done",
        "errors_count",
        "hopeless",
        "left",
        "need",
        "no",
        "replies",
        "shielded",
        "timer",
        "yes",
    )

    def __init__(
        self,
        replies: Sequence[Reply[T]],
        per_node: float,
        *,
        need: int | None = None,
        errors_count: bool = True,
        shielded: bool = False,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.replies = replies
        self.shielded = shielded
        self.left = len(replies)
        never = len(replies) + 1
        self.need = never if need is None else need  # `need` yes answers settle it early
        self.hopeless = never if need is None else len(replies) - need + 1  # and so many noes
        self.errors_count = errors_count
        self.yes = self.no = 0
        self._done = _Done(loop=loop)
        self._done.batch = self
        self.timer = loop.call_later(per_node, self._expire)
        for reply in replies:
            if reply.outcome is not UNSET:
                self.deliver(reply.outcome)
            else:
                reply.waiter = self
        if not replies:
            self._done.set_result(None)
            self.timer.cancel()

    def deliver(self, outcome: T | BaseException) -> None:
        """One reply settled (as it lands, also after the batch returned: it only counts)."""
        if outcome is True:
            self.yes += 1
        elif outcome is False or (self.errors_count and isinstance(outcome, BaseException)):
            self.no += 1
        self.left -= 1
        if self.left <= 0:
            self.timer.cancel()
        elif self.yes < self.need and self.no < self.hopeless:
            return
        if not self._done.done():
            self._done.set_result(None)

    def __await__(self) -> Generator[Any, None, list[Outcome[T]]]:
        yield from self._done
        return [reply.outcome if reply.outcome is not UNSET else Pending(reply) for reply in self.replies]

    def cancel(self) -> bool:
        """What the caller's cancellation does: stop waiting; unless shielded, abandon the replies."""
        return self._done.cancel()

    def _expire(self) -> None:
        for reply in self.replies:
            if not reply.done():
                reply.expire()

    def abandon(self) -> None:
        """The caller is gone: stop the timer; the replies are read and discarded in order."""
        self.timer.cancel()
        for reply in self.replies:
            reply.cancel()
