"""`Redlock`: locks over N independent Redis masters, with a fencing token in every lease.

The class is the public face: it owns the masters, the token source and the
subscriptions, and closes them. The attempts of an acquire (draw, quorum,
undo, wait) are `lockclient.attempts`; the acquires `aclose()` must end are
`lockclient.inflight`'s; renewals (watchdog, `extend()`) are
`lockclient.renewal`'s. A lease is forgotten only after the release script
answered; it is lost (marked, reported, released) only once its validity ran
out unconfirmed, or a renewal proved no quorum holds it any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable, Sequence
from types import TracebackType
from typing import Generic, ParamSpec, TypeVar, Unpack, overload

from lockclient import _nodes, multi, state
from lockclient._nodes import Master
from lockclient._notify import Notifier
from lockclient._quorum import (
    NodeAnswers,
    display_url,
    fan_out,
    quorum,
)
from lockclient.attempts import AttemptLoop
from lockclient.config import (
    DEFAULT_DRIFT_FACTOR,
    DEFAULT_KEY_PREFIX,
    DEFAULT_MAX_EXTENSIONS,
    DEFAULT_NODE_TIMEOUT,
    DEFAULT_RETRY,
    DEFAULT_TTL,
    DEFAULT_WATCHDOG_FRACTION,
    RedlockSettings,
    RetryPolicy,
    TLSSettings,
    check_masters,
    check_resource,
    check_tokens,
    check_ttl,
)
from lockclient.decorate import under_lock
from lockclient.errors import (
    ConfigurationError,
    ExtensionLimitReached,
    LockLost,
)
from lockclient.inflight import InFlight
from lockclient.lease import Lease, TokenT
from lockclient.multi import MultiLease
from lockclient.observe import Events, Observer
from lockclient.options import AcquireOptions, RedlockOptions, check_options
from lockclient.protocols import Clock, TokenSource
from lockclient.release import judge_release
from lockclient.renewal import Renewals
from lockclient.state import ForcedUnlock, LockState

__all__ = ["Redlock"]

P = ParamSpec("P")
R = TypeVar("R")

CONNECT_TIMEOUT = 1.0  # for connect(): a handshake on a loaded machine may take far longer than a command
CLOSED = "this Redlock is closed: build a new one"
# aclose() waits this long beyond one node timeout for the acquires it stopped to finish their undo
CLOSE_UNDO_GRACE = 1.0


class Redlock(Generic[TokenT]):
    """A Redlock client; `Redlock[int]` when built with a token source, `Redlock[None]` without
    (`Redlock[int | None]` when that is only known at run time).

    It owns one connection per master, its subscriber connections and the token
    source it was given: `aclose()` (or leaving `async with`) closes them all.
    """

    # The overloads only pick the token type; the keywords are `RedlockOptions`, their defaults below.
    @overload
    def __init__(
        self: Redlock[int], masters: Sequence[str], *, tokens: TokenSource, observer: Observer | None = ...,
        **options: Unpack[RedlockOptions],
    ) -> None: ...  # fmt: skip

    @overload
    def __init__(
        self: Redlock[None], masters: Sequence[str], *, tokens: None = None, observer: Observer | None = ...,
        **options: Unpack[RedlockOptions],
    ) -> None: ...  # fmt: skip

    @overload
    def __init__(
        self: Redlock[int | None], masters: Sequence[str], *, tokens: TokenSource | None,
        observer: Observer | None = ..., **options: Unpack[RedlockOptions],
    ) -> None: ...  # fmt: skip

    def __init__(
        self,
        masters: Sequence[str],
        *,
        tokens: TokenSource | None = None,
        ttl: float = DEFAULT_TTL,
        node_timeout: float = DEFAULT_NODE_TIMEOUT,
        retry: RetryPolicy = DEFAULT_RETRY,
        clock: Clock = time.monotonic,
        drift_factor: float = DEFAULT_DRIFT_FACTOR,
        max_extensions: int = DEFAULT_MAX_EXTENSIONS,
        watchdog_fraction: float = DEFAULT_WATCHDOG_FRACTION,
        reentrant: bool = False,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        tls: TLSSettings | None = None,
        observer: Observer | None = None,
    ) -> None:
        check_masters(masters)
        check_tokens(tokens)
        self.settings = RedlockSettings(
            ttl=ttl, node_timeout=node_timeout, retry=retry, drift_factor=drift_factor,
            max_extensions=max_extensions, watchdog_fraction=watchdog_fraction, reentrant=reentrant,
            key_prefix=key_prefix,
        )  # fmt: skip
        self._masters = [Master(url, connect_timeout=max(node_timeout, 0.2), tls=tls) for url in masters]
        self._urls = tuple(masters)
        self._tokens = tokens
        self._clock = clock
        self._events = Events(observer, clock)
        self.quorum = quorum(len(masters))
        self._notifier = Notifier(
            self._masters,
            connect_timeout=max(node_timeout, 0.2),
            subscribe_timeout=max(4 * node_timeout, 0.2),
        )
        self._loop: AttemptLoop[TokenT] = AttemptLoop(
            self._masters, self._urls, quorum=self.quorum, settings=self.settings, tokens=tokens,
            clock=clock, events=self._events, notifier=self._notifier,
        )  # fmt: skip
        self._held: dict[tuple[str, Hashable], Lease[TokenT]] = {}
        self._renewals: Renewals[TokenT] = Renewals(
            self._masters, self._urls, quorum=self.quorum, settings=self.settings, clock=clock,
            events=self._events, undo=lambda lease: self._loop.undo(lease.key, lease.value, self._masters),
        )  # fmt: skip
        self._closed = False
        self._in_flight = InFlight(closed=CLOSED)  # the acquires `aclose()` ends

    @property
    def masters(self) -> list[str]:
        return list(self._urls)

    @property
    def clock(self) -> Clock:
        """The monotonic clock validity and deadlines are measured on."""
        return self._clock

    def __repr__(self) -> str:
        shown = ", ".join(display_url(url) for url in self._urls)
        return (
            f"<Redlock masters=[{shown}] quorum={self.quorum} tokens={type(self._tokens).__name__} "
            f"ttl={self.settings.ttl}s>"
        )

    def key(self, resource: str) -> str:
        """The Redis key that holds `resource`'s lock on every master."""
        return self._loop.key(resource)

    # -- acquiring, releasing, extending (the attempts: lockclient/attempts.py) -------------

    async def acquire(
        self, resource: str, *, owner: Hashable | None = None, **options: Unpack[AcquireOptions[TokenT]]
    ) -> Lease[TokenT]:
        """Take `resource` for `ttl` seconds; raise `LockNotAcquired` if no attempt got a quorum.

        blocking=False tries once, and so does timeout=0 (its token draw is
        bounded by the source's own timeout, not by the zero). Otherwise
        attempts repeat until `timeout` seconds (None: no limit; the token
        draws included) or `retry.attempts` run out; an attempt never starts
        once a wait has used up the timeout. `auto_extend`
        starts the watchdog; `owner` (default: the current task) is who may
        re-enter when the Redlock is `reentrant`. The options and their
        defaults are `AcquireOptions`'s; this is where the defaults apply.
        """
        self._check_open(resource)
        check_options(options, where="acquire")
        ttl = options.get("ttl")
        ttl = self.settings.ttl if ttl is None else ttl
        blocking = options.get("blocking", True)
        timeout = options.get("timeout")
        on_lost = options.get("on_lost")
        check_ttl(ttl, self.settings.node_timeout)
        if timeout is not None and not timeout >= 0:
            raise ConfigurationError(f"timeout must be >= 0 seconds or None, got {timeout!r}")
        if timeout == 0:
            # one attempt, as blocking=False: a deadline of "now" would leave the token draw no time
            # at all, and a zero timeout with a token source could never succeed
            blocking, timeout = False, None
        if owner is None:
            owner = asyncio.current_task()
        if self.settings.reentrant:
            held = self._held.get((resource, owner))
            if held is not None and not held.lost:
                held.holds += 1  # Step 8: the same owner re-enters; released when the count reaches zero
                return held
        # the attempt loop, ended by `aclose()`: a closed Redlock grants nothing, so an acquire in flight
        # then raises `ConfigurationError` (after undoing its attempt, as on any cancellation)
        attempts = self._loop.run(resource, ttl, blocking, timeout, owner, on_lost)
        lease = await self._in_flight.run(attempts, what="Redlock.acquire")
        if self.settings.reentrant:
            self._held[(resource, owner)] = lease
        if options.get("auto_extend", False):
            self._renewals.watch(lease)
        return lease

    async def release(self, lease: Lease[TokenT]) -> None:
        """Compare-and-delete on every master (step 5); `LockLost` if a quorum no longer held it.

        Releasing never removes another owner's key. `LockLost` needs evidence:
        enough masters answered "not yours" that no quorum can have held it
        (masters that did not answer are given the benefit of the doubt; their
        keys expire). A re-entered lease is only released by its last holder.
        """
        if lease.holds > 1:
            lease.holds -= 1
            return
        if lease.holds == 0:
            raise LockLost(f"the lease on {lease.resource!r} was already released", resource=lease.resource)
        lease.holds = 0
        self._held.pop((lease.resource, lease.owner), None)
        try:
            await self._renewals.stop(lease)  # the watchdog of `auto_extend`
        finally:  # cancelled while the watchdog stopped: the keys go all the same (the undo is shielded)
            outcomes = await self._loop.undo(lease.key, lease.value, self._masters, need=self.quorum)
        judge_release(lease, outcomes, masters=len(self._masters), quorum=self.quorum, events=self._events)

    async def extend(self, lease: Lease[TokenT], *, ttl: float | None = None) -> Lease[TokenT]:
        """Give `lease` `ttl` more seconds (default: its own TTL) on a quorum, within its validity (step 6).

        A round that gets no quorum is retried (backoff from `retry.delay`)
        while the lease is still valid. Raises `ExtensionLimitReached`
        (nothing changed) past `max_extensions`; `LockLost` (the lease is
        lost and released) when no round was confirmed within the validity,
        or one proved that no quorum holds the lease any more.
        """
        limit = self.settings.max_extensions
        if lease.extensions >= limit:
            raise ExtensionLimitReached(
                f"the lease on {lease.resource!r} was already extended {lease.extensions} times, "
                f"the limit is {limit}: release it and acquire again, or raise max_extensions",
                resource=lease.resource,
                limit=limit,
            )
        await self._renewals.renew(lease, lease.ttl if ttl is None else ttl)
        lease.extensions += 1
        return lease

    @contextlib.asynccontextmanager
    async def lock(
        self, resource: str, *, owner: Hashable | None = None, **options: Unpack[AcquireOptions[TokenT]]
    ) -> AsyncIterator[Lease[TokenT]]:
        """`async with locker.lock(name) as lease:` acquire, yield, release.

        If the lease was lost or ran out before the block ended, leaving the
        block raises `LockLost` (after releasing what is left): whatever the
        block did after that point must not be trusted without the fence.
        """
        lease = await self.acquire(resource, owner=owner, **options)
        try:
            yield lease
        except BaseException:
            with contextlib.suppress(LockLost):
                await self.release(lease)
            raise
        if not lease.lost:
            await self.release(lease)
            return
        with contextlib.suppress(LockLost):
            await self.release(lease)
        if lease.holds == 0:
            raise LockLost(
                f"the lease on {lease.resource!r} (token {lease.token}) was lost inside the block: "
                f"{lease.lost_reason}",
                resource=lease.resource,
                token=lease.token,
            )

    def locked(
        self, resource: str, **options: Unpack[AcquireOptions[TokenT]]
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """Decorate a coroutine function so every call runs under a lease on `resource`.

        Each call is `async with self.lock(resource, ...)` around the function:
        the same waiting, errors and release. The function does not see the
        lease; for fenced writes, use `lock()` and pass the lease to the store.
        """
        check_resource(resource)
        check_options(options, where="locked")
        return under_lock(lambda: self.lock(resource, **options))

    # -- lifetime ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """End the acquires in flight, stop watchdogs, close subscriber and master connections and the
        token source."""
        if self._closed:
            return
        self._closed = True
        await self._in_flight.stop(self.settings.node_timeout + CLOSE_UNDO_GRACE)
        await self._renewals.aclose()
        await self._notifier.aclose()
        await asyncio.gather(*(master.aclose() for master in self._masters))  # each waits for its replies
        if self._tokens is not None:
            await self._tokens.aclose()

    async def connect(self) -> dict[str, str]:
        """Open a connection to every master now, each answer in words (`async with` does this).

        A cold connection costs a TCP and protocol handshake; done here, it is
        not charged to the first attempt's per-node timeout. A master that does
        not answer is not an error here: every attempt tries it again.
        """
        outcomes = await fan_out([m.send(_nodes.PING) for m in self._masters], CONNECT_TIMEOUT)
        return dict(NodeAnswers(self._urls, outcomes, CONNECT_TIMEOUT))

    async def __aenter__(self) -> Redlock[TokenT]:
        await self.connect()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- state, operators, several resources (lockclient/state.py, lockclient/multi.py) ---------

    async def inspect(self, resource: str) -> LockState:
        """Each master's value and TTL for `resource`'s key, and whether a quorum holds one (by whom)."""
        self._check_open(resource)
        return await state.inspect(
            self._masters, resource=resource, key=self.key(resource), quorum=self.quorum,
            per_node=self.settings.node_timeout,
        )  # fmt: skip

    async def force_unlock(
        self, resource: str, *, confirm: bool = False, token: int | None = None
    ) -> ForcedUnlock:
        """For operators: delete `resource`'s key on every master that answers, whoever holds it.

        Refused (`ConfigurationError`) unless `confirm=True`: the holder may
        still be writing, and only the fence stops it then. With `token`, only
        that holder's key is deleted (a newer holder's is kept). Waiters are
        told as by a release; the old holder's later release cannot touch a new lock.
        """
        self._check_open(resource)
        return await state.force_unlock(
            self._masters, resource=resource, key=self.key(resource), per_node=self.settings.node_timeout,
            confirm=confirm, token=token,
        )  # fmt: skip

    def lock_many(
        self,
        resources: Iterable[str],
        *,
        owner: Hashable | None = None,
        **options: Unpack[AcquireOptions[TokenT]],
    ) -> contextlib.AbstractAsyncContextManager[MultiLease[TokenT]]:
        """`async with locker.lock_many([a, b]) as multi:` all or nothing, sorted; see `acquire_many`."""
        return multi.lock_many(self, resources, owner=owner, **options)

    async def acquire_many(
        self,
        resources: Iterable[str],
        *,
        owner: Hashable | None = None,
        **options: Unpack[AcquireOptions[TokenT]],
    ) -> MultiLease[TokenT]:
        """Take every resource (sorted, each once) with its own token, within `timeout` for the group.

        All or nothing: if one is not granted in time, those taken are
        released and that resource's `LockNotAcquired` is raised.
        """
        return await multi.acquire_many(self, resources, owner=owner, **options)

    async def release_many(self, leases: MultiLease[TokenT]) -> None:
        """Release every lease of the group at once; `LockLost` as `release`, for any that was lost."""
        await multi.release_many(self, leases)

    async def extend_many(
        self, leases: MultiLease[TokenT], *, ttl: float | None = None
    ) -> MultiLease[TokenT]:
        """Extend every lease of the group at once; errors as `extend`, raised once all were tried."""
        await multi.extend_many(self, leases, ttl=ttl)
        return leases

    def _check_open(self, resource: str) -> None:
        """Refuse a call on a closed Redlock, or for a resource that is not a non-empty `str`: before
        anything is drawn or sent."""
        if self._closed:
            raise ConfigurationError(CLOSED)
        check_resource(resource)
