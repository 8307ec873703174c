"""Redlock over N independent Redis masters, with a fencing token in every lease.

One attempt (steps 1-4 of the algorithm): draw a token, build a fresh random
value that records it, send `SET key value NX PX ttl` to every master at once,
and grant only with a quorum and validity left; otherwise undo on every master
that may hold the value and, if blocking, wait for a release message (or a
jittered pause) and try again with a new token.

Failure semantics: nothing is granted without a quorum inside the validity
window; a cancelled attempt undoes itself, shielded from a second
cancellation; a lease is forgotten only after the release script has
answered; a failed extension or watchdog renewal marks the lease lost at
once and releases what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from types import TracebackType
from typing import Generic, cast, overload

from lockclient import _nodes
from lockclient._nodes import Master, release_channel
from lockclient._notify import Notifier, Watch
from lockclient._quorum import NodeAnswers, Refusal, drift, fan_out, quorum, tally, validity
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
    check_ttl,
)
from lockclient.errors import (
    ConfigurationError,
    ExtensionLimitReached,
    LockLost,
    LockNotAcquired,
    QuorumUnavailable,
)
from lockclient.lease import EXPIRED, Lease, TokenT, lock_value
from lockclient.protocols import Clock, TokenSource
from lockclient.transport.fanout import Outcome, current

__all__ = ["Redlock"]

OnLost = Callable[[Lease[TokenT]], object]

CONNECT_TIMEOUT = 1.0  # for connect(): a handshake on a loaded machine may take far longer than a command


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


class Redlock(Generic[TokenT]):
    """A Redlock client; `Redlock[int]` when built with a token source, `Redlock[None]` without
    (`Redlock[int | None]` when that is only known at run time).

    It owns one connection per master, its subscriber connections and the token
    source it was given: `aclose()` (or leaving `async with`) closes them all.
    """

    @overload
    def __init__(
        self: Redlock[int], masters: Sequence[str], *, tokens: TokenSource, ttl: float = ...,
        node_timeout: float = ..., retry: RetryPolicy = ..., clock: Clock = ...,
        drift_factor: float = ..., max_extensions: int = ..., watchdog_fraction: float = ...,
        reentrant: bool = ..., key_prefix: str = ..., tls: TLSSettings | None = ...,
    ) -> None: ...  # fmt: skip

    @overload
    def __init__(
        self: Redlock[None], masters: Sequence[str], *, tokens: None = None, ttl: float = ...,
        node_timeout: float = ..., retry: RetryPolicy = ..., clock: Clock = ...,
        drift_factor: float = ..., max_extensions: int = ..., watchdog_fraction: float = ...,
        reentrant: bool = ..., key_prefix: str = ..., tls: TLSSettings | None = ...,
    ) -> None: ...  # fmt: skip

    @overload
    def __init__(
        self: Redlock[int | None], masters: Sequence[str], *, tokens: TokenSource | None, ttl: float = ...,
        node_timeout: float = ..., retry: RetryPolicy = ..., clock: Clock = ...,
        drift_factor: float = ..., max_extensions: int = ..., watchdog_fraction: float = ...,
        reentrant: bool = ..., key_prefix: str = ..., tls: TLSSettings | None = ...,
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
    ) -> None:
        check_masters(masters)
        self.settings = RedlockSettings(
            ttl=ttl, node_timeout=node_timeout, retry=retry, drift_factor=drift_factor,
            max_extensions=max_extensions, watchdog_fraction=watchdog_fraction, reentrant=reentrant,
            key_prefix=key_prefix,
        )  # fmt: skip
        self._masters = [Master(url, connect_timeout=max(node_timeout, 0.2), tls=tls) for url in masters]
        self._urls = tuple(masters)
        self._tokens = tokens
        self._clock = clock
        self.quorum = quorum(len(masters))
        self._notifier = Notifier(
            self._masters,
            connect_timeout=max(node_timeout, 0.2),
            subscribe_timeout=max(4 * node_timeout, 0.2),
        )
        self._held: dict[tuple[str, Hashable], Lease[TokenT]] = {}
        self._watchdogs: dict[Lease[TokenT], asyncio.Task[None]] = {}
        self._closed = False

    @property
    def masters(self) -> list[str]:
        return list(self._urls)

    def key(self, resource: str) -> str:
        """The Redis key that holds `resource`'s lock on every master."""
        return self.settings.key_prefix + resource

    # -- acquiring -------------------------------------------------------------

    async def acquire(
        self,
        resource: str,
        *,
        ttl: float | None = None,
        blocking: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - the wait bounds many attempts and their pauses
        auto_extend: bool = False,
        on_lost: OnLost[TokenT] | None = None,
        owner: Hashable | None = None,
    ) -> Lease[TokenT]:
        """Take `resource` for `ttl` seconds; raise `LockNotAcquired` if no attempt got a quorum.

        blocking=False tries once. Otherwise attempts repeat until `timeout`
        seconds (None: no limit) or `retry.attempts` run out. `auto_extend`
        starts the watchdog; `owner` (default: the current task) is who may
        re-enter when the Redlock is `reentrant`.
        """
        if self._closed:
            raise ConfigurationError("this Redlock is closed: build a new one")
        if not resource:
            raise ConfigurationError(f"resource must be a non-empty string, got {resource!r}")
        ttl = self.settings.ttl if ttl is None else ttl
        check_ttl(ttl, self.settings.node_timeout)
        if timeout is not None and not timeout >= 0:
            raise ConfigurationError(f"timeout must be >= 0 seconds or None, got {timeout!r}")
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
        if auto_extend:
            self._watchdogs[lease] = asyncio.create_task(self._watchdog(lease), name=f"watchdog {resource}")
        return lease

    async def _acquire(
        self,
        resource: str,
        ttl: float,
        blocking: bool,
        timeout: float | None,  # noqa: ASYNC109 - see acquire
        owner: Hashable,
        on_lost: OnLost[TokenT] | None,
    ) -> Lease[TokenT]:
        deadline = math.inf if timeout is None else self._clock() + timeout
        retry = self.settings.retry
        attempts = 0
        outage_since: float | None = None  # when attempts began to find no quorum possible
        watch: Watch | None = None
        try:
            while True:
                attempts += 1
                # Step 10: a fresh token before every attempt, so whoever stalls holds the older one
                drawn_at = self._clock()
                token = await self._draw(resource, deadline)
                value = lock_value(token)
                if watch is not None:
                    watch.arm(value)
                result = await self._attempt(resource, token, drawn_at, value, ttl, owner, on_lost)
                if isinstance(result, Lease):
                    return result
                now = self._clock()
                left = deadline - now
                if not result.tally.unreachable():
                    outage_since = None
                elif outage_since is None:
                    outage_since = drawn_at
                if outage_since is not None and (not blocking or now - outage_since >= retry.unreachable):
                    raise QuorumUnavailable(
                        f"could not lock {resource!r}: {len(result.failed)} of {result.tally.nodes} masters "
                        f"did not answer for {now - outage_since:.1f} s ({', '.join(result.failed)}): an "
                        f"outage, not contention; per-node reasons are in .reasons. Bring the masters back, "
                        f"or wait longer for them with RetryPolicy(unreachable=SECONDS) "
                        f"(now {retry.unreachable:g})",
                        resource=resource,
                        unreachable=result.failed,
                        reasons=result.nodes,
                    )
                if not blocking or left <= 0 or attempts == retry.attempts:
                    raise LockNotAcquired(
                        f"could not lock {resource!r} after {attempts} attempt(s): {result.summary}; "
                        "per-node reasons are in .reasons (raise timeout, or check the masters)",
                        resource=resource,
                        reasons=result.nodes,
                    )
                if watch is None:
                    # Step 9: subscribe, then try again at once so a release before the
                    # subscription took effect is not missed.
                    watch = await self._notifier.watch(release_channel(self.key(resource)))
                    watch.own.add(value.encode())
                    continue
                pause = retry.poll if result.tally.held_elsewhere() else retry.backoff()
                await watch.wait(min(pause, left))
        finally:
            if watch is not None:
                await self._notifier.unwatch(watch)

    async def _draw(self, resource: str, deadline: float) -> TokenT:
        """The next token; within the acquire's deadline, which bounds the draw too."""
        if self._tokens is None:
            return cast(TokenT, None)
        if deadline == math.inf:
            return cast(TokenT, await self._tokens.next_token(resource))
        try:
            async with asyncio.timeout(max(0.0, deadline - self._clock())) as window:
                return cast(TokenT, await self._tokens.next_token(resource))
        except TimeoutError as exc:
            if not window.expired():
                raise  # the source's own timeout, not the acquire's
            raise LockNotAcquired(
                f"could not lock {resource!r}: the token source gave no token before the acquire's "
                "timeout; check the token source, or raise timeout",
                resource=resource,
            ) from exc

    async def _attempt(
        self,
        resource: str,
        token: TokenT,
        drawn_at: float,
        value: str,
        ttl: float,
        owner: Hashable,
        on_lost: OnLost[TokenT] | None,
    ) -> Lease[TokenT] | Refusal:
        key = self.key(resource)
        ttl_ms = _ms(ttl)
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
        counts = tally(outcomes)
        failed = tuple(
            url for url, o in zip(self._urls, outcomes, strict=True) if isinstance(current(o), BaseException)
        )
        return Refusal(
            counts, dict(nodes), self.quorum, elapsed=elapsed, ttl=ttl, validity_left=left, failed=failed
        )

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
        await self._stop_watchdog(lease)
        outcomes = await self._undo(lease.key, lease.value, self._masters, need=self.quorum)
        lease.holds = 0
        self._held.pop((lease.resource, lease.owner), None)
        not_ours = sum(o is False for o in outcomes)
        if len(outcomes) - not_ours >= self.quorum:
            # A quorum released it, or masters that did not answer may still have held it (their keys
            # expire by the TTL): no evidence the lease was lost, so no error.
            lease._mark_lost("released", notify=False)
            return
        why = (
            f"{not_ours} of {len(self._masters)} masters no longer held it at release, "
            f"so a quorum ({self.quorum}) cannot have"
        )
        lease._mark_lost(why)
        raise LockLost(
            f"the lease on {lease.resource!r} (token {lease.token}) was lost before release: {why}; "
            "its writes must be checked by the fence",
            resource=lease.resource,
            token=lease.token,
        )

    async def extend(self, lease: Lease[TokenT], *, ttl: float | None = None) -> Lease[TokenT]:
        """Give `lease` `ttl` more seconds (default: its own TTL) on a quorum, within its validity (step 6).

        Raises `ExtensionLimitReached` (nothing changed) past `max_extensions`,
        `LockLost` (the lease is lost and released) when no quorum confirmed in time.
        """
        limit = self.settings.max_extensions
        if lease.extensions >= limit:
            raise ExtensionLimitReached(
                f"the lease on {lease.resource!r} was already extended {lease.extensions} times, "
                f"the limit is {limit}: release it and acquire again, or raise max_extensions",
                resource=lease.resource,
                limit=limit,
            )
        await self._renew(lease, lease.ttl if ttl is None else ttl)
        lease.extensions += 1
        return lease

    async def _renew(self, lease: Lease[TokenT], ttl: float) -> None:
        check_ttl(ttl, self.settings.node_timeout)
        if lease.lost:  # e.g. the loop was blocked past the deadline: too late to renew
            why = lease.lost_reason or EXPIRED
            lease._mark_lost(why)
            raise LockLost(
                f"could not extend the lease on {lease.resource!r} (token {lease.token}): {why}",
                resource=lease.resource,
                token=lease.token,
            )
        start = self._clock()
        command = _nodes.extend(lease.key, lease.value, _ms(ttl))
        outcomes = await fan_out(
            [m.send(command) for m in self._masters],
            self.settings.node_timeout,
            need=self.quorum,
        )
        end = self._clock()
        extended = sum(o is True for o in outcomes)
        if extended >= self.quorum and end < lease.deadline:
            lease.deadline = start + ttl - drift(ttl, self.settings.drift_factor)
            lease.ttl = ttl
            return
        if extended >= self.quorum:
            why = "the extension was confirmed only after the lease's validity had run out"
        else:
            counts = tally(outcomes)
            why = f"{counts.refused} of {counts.nodes} masters no longer held it"
            why += f", {counts.failed} failed" if counts.failed else ""
            why += f", {counts.pending} had not answered" if counts.pending else ""
            why += f", so a quorum ({self.quorum}) can no longer confirm it"
        lease._mark_lost(why)
        await self._undo(lease.key, lease.value, self._masters)
        raise LockLost(
            f"could not extend the lease on {lease.resource!r} (token {lease.token}): {why}",
            resource=lease.resource,
            token=lease.token,
        )

    async def _watchdog(self, lease: Lease[TokenT]) -> None:
        """Step 7: renew every `ttl * watchdog_fraction` until released or lost."""
        while True:
            await asyncio.sleep(lease.ttl * self.settings.watchdog_fraction)
            try:
                await self._renew(lease, lease.ttl)
            except LockLost:
                return  # _renew marked the lease lost; the holder sees it via check(), on_lost or wait_lost()
            lease.renewals += 1

    async def _stop_watchdog(self, lease: Lease[TokenT]) -> None:
        task = self._watchdogs.pop(lease, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- the context manager ---------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lock(
        self,
        resource: str,
        *,
        ttl: float | None = None,
        blocking: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 - the wait bounds many attempts and their pauses
        auto_extend: bool = False,
        on_lost: OnLost[TokenT] | None = None,
        owner: Hashable | None = None,
    ) -> AsyncIterator[Lease[TokenT]]:
        """`async with locker.lock(name) as lease:` acquire, yield, release.

        If the lease was lost or ran out before the block ended, leaving the
        block raises `LockLost` (after releasing what is left): whatever the
        block did after that point must not be trusted without the fence.
        """
        lease = await self.acquire(
            resource, ttl=ttl, blocking=blocking, timeout=timeout, auto_extend=auto_extend, on_lost=on_lost,
            owner=owner,
        )  # fmt: skip
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

    # -- lifetime ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop watchdogs, close subscriber and master connections and the token source."""
        if self._closed:
            return
        self._closed = True
        for lease in list(self._watchdogs):
            await self._stop_watchdog(lease)
        await self._notifier.aclose()
        for master in self._masters:
            await master.aclose()
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
