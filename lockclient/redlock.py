"""Redlock over N independent Redis masters, with a fencing token in every lease.

One attempt (steps 1-4 of the algorithm): draw a token, build a fresh random
value that records it, send `SET key value NX PX ttl` to every master at once,
and grant only with a quorum and validity left; otherwise undo on every master
that may hold the value and, if blocking, wait for a release message (or a
jittered pause) and try again with a new token.

Failure semantics: nothing is granted without a quorum inside the validity
window; a cancelled attempt undoes itself, shielded from a second
cancellation; a lease is forgotten only after the release script has
answered. Contention is waited out until `timeout`; an unreachable majority
is an outage and raises `QuorumUnavailable` after `retry.unreachable`
seconds. A renewal (watchdog or `extend()`) that gets no quorum is retried
with backoff until the lease's validity runs out; the lease is lost (marked,
reported, released) only then, or as soon as a renewal proves that no quorum
holds its value any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect as pyinspect
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable, Sequence
from types import TracebackType
from typing import Generic, ParamSpec, TypeVar, Unpack, cast, overload

from lockclient import _nodes, multi, state
from lockclient._nodes import Master, release_channel
from lockclient._notify import Notifier, Watch
from lockclient._quorum import (
    NodeAnswers,
    NotGranted,
    display_url,
    drift,
    failed_masters,
    fan_out,
    quorum,
    tally,
    validity,
)
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
from lockclient.errors import (
    ConfigurationError,
    ExtensionLimitReached,
    LockLost,
    LockNotAcquired,
    QuorumUnavailable,
    TokenSourceError,
)
from lockclient.lease import Lease, TokenT, lock_value
from lockclient.multi import MultiLease
from lockclient.observe import Events, Observer
from lockclient.options import AcquireOptions, OnLost, RedlockOptions, check_options
from lockclient.protocols import Clock, TokenSource
from lockclient.renewal import Renewals, ms
from lockclient.state import ForcedUnlock, LockState
from lockclient.transport.fanout import Outcome

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
        self._held: dict[tuple[str, Hashable], Lease[TokenT]] = {}
        self._renewals: Renewals[TokenT] = Renewals(
            self._masters, self._urls, quorum=self.quorum, settings=self.settings, clock=clock,
            events=self._events, undo=lambda lease: self._undo(lease.key, lease.value, self._masters),
        )  # fmt: skip
        self._closed = False
        # Tasks inside `_acquire`, and those of them that `aclose()` cancelled (see `_stop_acquires`).
        self._acquiring: set[asyncio.Task[object]] = set()
        self._stopping: set[asyncio.Task[object]] = set()
        self._acquires_ended: asyncio.Event | None = None

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
        return self.settings.key_prefix + resource

    # -- acquiring -------------------------------------------------------------

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
        lease = await self._acquire(resource, ttl, blocking, timeout, owner, on_lost)
        if self.settings.reentrant:
            self._held[(resource, owner)] = lease
        if options.get("auto_extend", False):
            self._renewals.watch(lease)
        return lease

    async def _acquire(
        self,
        resource: str,
        ttl: float,
        blocking: bool,
        timeout: float | None,  # noqa: ASYNC109 - the wait bounds many attempts and their pauses
        owner: Hashable,
        on_lost: OnLost[TokenT] | None,
    ) -> Lease[TokenT]:
        """`_attempts`, ended by `aclose()`: a closed Redlock grants nothing, so an acquire in flight
        then raises `ConfigurationError` (after undoing its attempt, as on any cancellation)."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Redlock.acquire must run in an asyncio task")
        self._acquiring.add(task)
        try:
            return await self._attempts(resource, ttl, blocking, timeout, owner, on_lost)
        except asyncio.CancelledError:
            if task not in self._stopping:
                raise
            self._stopping.discard(task)
            if task.uncancel() > 0:  # cancelled by its caller too: that cancellation goes on
                raise
            raise ConfigurationError(CLOSED) from None
        finally:
            self._acquiring.discard(task)
            self._stopping.discard(task)
            if not self._acquiring and self._acquires_ended is not None:
                self._acquires_ended.set()

    async def _attempts(
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
            await self._undo(key, value, self._masters)
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
        await self._undo(
            key, value, [m for m, o in zip(self._masters, outcomes, strict=True) if o is not False]
        )
        counts = tally(outcomes)  # the undo was queued behind each SET: every master has answered by now
        return NotGranted(
            counts, dict(nodes), self.quorum, failed=failed_masters(self._urls, outcomes),
            elapsed=elapsed, ttl=ttl, validity_left=left,
        )  # fmt: skip

    async def _undo(
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

    # -- releasing and extending ---------------------------------------------------

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
            await self._stop_watchdog(lease)
        finally:  # cancelled while the watchdog stopped: the keys go all the same (the undo is shielded)
            outcomes = await self._undo(lease.key, lease.value, self._masters, need=self.quorum)
        not_ours = sum(o is False for o in outcomes)
        if len(outcomes) - not_ours >= self.quorum:
            # A quorum released it, or masters that did not answer may still have held it (their keys
            # expire by the TTL): no evidence the lease was lost, so no error.
            lease._mark_lost("released", notify=False)
            self._events.released(lease)
            return
        why = (
            f"{not_ours} of {len(self._masters)} masters no longer held it at release, "
            f"so a quorum ({self.quorum}) cannot have"
        )
        if lease._mark_lost(why):
            self._events.lost(lease, f"found at release: {why}")
        raise LockLost(
            f"the lease on {lease.resource!r} (token {lease.token}) was lost before release: {why}; "
            "its writes must be checked by the fence",
            resource=lease.resource,
            token=lease.token,
        )

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

    async def _stop_watchdog(self, lease: Lease[TokenT]) -> None:
        """Stop renewing `lease` (started by `auto_extend`): it then lives until its validity runs out."""
        await self._renewals.stop(lease)

    # -- the context manager ---------------------------------------------------------

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

        def decorate(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            if not pyinspect.iscoroutinefunction(function):
                raise ConfigurationError(
                    f"{getattr(function, '__qualname__', function)!r} is not a coroutine function: "
                    "decorate `async def` functions, or use lockclient.sync.Redlock.locked for plain ones"
                )

            @functools.wraps(function)
            async def under_lease(*args: P.args, **kwargs: P.kwargs) -> R:
                async with self.lock(resource, **options):
                    return await function(*args, **kwargs)

            return under_lease

        return decorate

    # -- lifetime ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """End the acquires in flight, stop watchdogs, close subscriber and master connections and the
        token source."""
        if self._closed:
            return
        self._closed = True
        await self._stop_acquires()
        await self._renewals.aclose()
        await self._notifier.aclose()
        await asyncio.gather(*(master.aclose() for master in self._masters))  # each waits for its replies
        if self._tokens is not None:
            await self._tokens.aclose()

    async def _stop_acquires(self) -> None:
        """Cancel every acquire in flight (each then raises `ConfigurationError`, see `_acquire`) and
        wait for them to end, so that their undo reaches the masters before the connections close.

        Cancelling the task is how `asyncio.timeout` ends a block too: every wait (a draw, a fan-out,
        a backoff, a release message) ends at once, and the attempt's shielded undo runs. An undo is
        bounded by the node timeout; a master that has not answered by then keeps the key until its
        TTL, as when it is unreachable.
        """
        if not self._acquiring:
            return
        self._acquires_ended = asyncio.Event()
        for task in self._acquiring:
            self._stopping.add(task)
            task.cancel()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.node_timeout + CLOSE_UNDO_GRACE):
                await self._acquires_ended.wait()

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
