"""Several resources locked together: all or nothing, in one canonical order.

Each resource is taken by the single-resource acquire (its own token, its
own quorum, its own watchdog), one after the other in sorted order without
repeats. Two callers whose sets overlap therefore always wait on the shared
resource that sorts first and can never hold one each of a pair the other
needs: no deadlock. `timeout` bounds the whole group. If one resource is not
granted in time, or the first leases ran out while the later ones were
waited for, every lease taken is released before the error is raised:
nothing is left held.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Generic, Protocol, Unpack

from lockclient.config import check_resource
from lockclient.errors import ConfigurationError, LockLost, LockNotAcquired
from lockclient.lease import Lease, TokenT
from lockclient.options import AcquireOptions, check_options

if TYPE_CHECKING:
    from lockclient.protocols import Clock


class Locker(Protocol[TokenT]):
    """What a group needs from the lock that takes its resources one by one (a `Redlock`)."""

    @property
    def clock(self) -> Clock: ...

    async def acquire(
        self, resource: str, *, owner: Hashable | None = None, **options: Unpack[AcquireOptions[TokenT]]
    ) -> Lease[TokenT]: ...

    async def release(self, lease: Lease[TokenT]) -> None: ...

    async def extend(self, lease: Lease[TokenT], *, ttl: float | None = None) -> Lease[TokenT]: ...


__all__ = ["MultiLease", "acquire_many", "canonical", "extend_many", "lock_many", "release_many"]


def canonical(resources: Iterable[str]) -> list[str]:
    """The order every caller takes a set of resources in: sorted, each once."""
    if isinstance(resources, str):
        raise ConfigurationError(
            f"lock_many takes a list of resource names, got the string {resources!r}: "
            f"write lock_many([{resources!r}]) or use lock()"
        )
    given = list(resources)
    if not given:
        raise ConfigurationError("lock_many needs one or more non-empty resource names, got none")
    for name in given:  # each checked before sorting (a mix of types would not sort) and before any is taken
        check_resource(name)
    return sorted(set(given))


class MultiLease(Mapping[str, Lease[TokenT]], Generic[TokenT]):
    """One lease per resource, taken together: `multi[resource]` is that resource's `Lease`.

    Pass `multi[resource]` to the gateway for a key under that resource: each
    request names its own resource and token.
    """

    def __init__(self, leases: Sequence[Lease[TokenT]]) -> None:
        self._leases = {lease.resource: lease for lease in leases}

    def __getitem__(self, resource: str) -> Lease[TokenT]:
        return self._leases[resource]

    def __iter__(self) -> Iterator[str]:
        return iter(self._leases)

    def __len__(self) -> int:
        return len(self._leases)

    @property
    def tokens(self) -> dict[str, TokenT]:
        return {resource: lease.token for resource, lease in self._leases.items()}

    @property
    def lost(self) -> bool:
        """True once any of the leases is lost: the group no longer holds everything it took."""
        return any(lease.lost for lease in self._leases.values())

    def remaining(self) -> float:
        """Seconds of validity left on every lease: the shortest."""
        return min(lease.remaining() for lease in self._leases.values())

    def check(self) -> None:
        """Raise `LockLost` (of the first lost resource) unless every lease is still valid."""
        for lease in self._leases.values():
            lease.check()

    def __repr__(self) -> str:
        leases = ", ".join(f"{r!r}: token={lease.token}" for r, lease in self._leases.items())
        state = "lost" if self.lost else f"valid {self.remaining():.3f}s"
        return f"<MultiLease {{{leases}}} {state}>"


async def acquire_many(
    locker: Locker[TokenT],
    resources: Iterable[str],
    *,
    owner: Hashable | None,
    **options: Unpack[AcquireOptions[TokenT]],
) -> MultiLease[TokenT]:
    names = canonical(resources)
    check_options(options, where="acquire_many")
    timeout = options.get("timeout")  # bounds the whole group: each acquire gets what is left of it
    if timeout is not None and not timeout >= 0:
        raise ConfigurationError(f"timeout must be >= 0 seconds or None, got {timeout!r}")
    clock = locker.clock
    deadline = math.inf if timeout is None else clock() + timeout
    owner = asyncio.current_task() if owner is None else owner
    taken: list[Lease[TokenT]] = []
    try:
        for name in names:
            left = None if deadline == math.inf else max(0.0, deadline - clock())
            step: AcquireOptions[TokenT] = {**options, "timeout": left}
            lease = await locker.acquire(name, owner=owner, **step)
            taken.append(lease)
        expired = [lease.resource for lease in taken if lease.lost]
        if expired:
            raise LockNotAcquired(
                f"could not lock {names!r} together: the lease on {expired[0]!r} ran out while the later "
                "resources were waited for; raise ttl above the wait, or pass auto_extend=True",
                resource=expired[0],
            )
    except BaseException as exc:
        await _release_quietly(locker, taken)
        if isinstance(exc, LockNotAcquired) and len(names) > 1:
            exc.add_note(f"lock_many {names!r}: the {len(taken)} lease(s) taken were released")
        raise
    return MultiLease(taken)


async def _release_quietly(locker: Locker[TokenT], leases: Sequence[Lease[TokenT]]) -> None:
    with contextlib.suppress(LockLost):
        await release_many(locker, MultiLease(leases))


async def release_many(locker: Locker[TokenT], multi: MultiLease[TokenT]) -> None:
    """Release every lease at once; `LockLost` (after all were tried) naming each one that was lost."""
    # Every release is a task started now, and the wait for them is shielded: a cancellation of the
    # caller (a timeout firing as the block ends, even before the tasks first ran) ends the wait, not them.
    releases = [asyncio.ensure_future(locker.release(lease)) for lease in multi.values()]
    outcomes = await asyncio.shield(asyncio.gather(*releases, return_exceptions=True))
    _raise_first(outcomes)


async def extend_many(locker: Locker[TokenT], multi: MultiLease[TokenT], *, ttl: float | None) -> None:
    """Extend every lease at once; the first error (after all were tried), `LockLost` naming each lost one."""
    outcomes = await asyncio.gather(
        *(locker.extend(lease, ttl=ttl) for lease in multi.values()), return_exceptions=True
    )
    _raise_first(outcomes)


def _raise_first(outcomes: Sequence[object]) -> None:
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    others = [e for e in errors if not isinstance(e, LockLost)]
    if others:
        raise others[0]
    lost = [e for e in errors if isinstance(e, LockLost)]
    if len(lost) == 1:
        raise lost[0]
    if lost:
        raise LockLost(
            f"{len(lost)} leases of the group were lost: " + "; ".join(str(e) for e in lost),
            resource=lost[0].resource,
            token=lost[0].token,
        ) from lost[0]


@contextlib.asynccontextmanager
async def lock_many(
    locker: Locker[TokenT],
    resources: Iterable[str],
    *,
    owner: Hashable | None,
    **options: Unpack[AcquireOptions[TokenT]],
) -> AsyncIterator[MultiLease[TokenT]]:
    """Acquire all, yield, release all; `LockLost` on leaving if any lease was lost inside the block."""
    multi = await acquire_many(locker, resources, owner=owner, **options)
    try:
        yield multi
    except BaseException:
        await _release_quietly(locker, list(multi.values()))
        raise
    lost = [lease for lease in multi.values() if lease.lost]
    if not lost:
        await release_many(locker, multi)
        return
    await _release_quietly(locker, list(multi.values()))
    raise LockLost(
        f"the lease on {lost[0].resource!r} (token {lost[0].token}) of the group was lost inside the block: "
        f"{lost[0].lost_reason}",
        resource=lost[0].resource,
        token=lost[0].token,
    )
