"""What the lab's workload needs from a lock and from the store, as small Protocols.

The workload (acquire, read counter, write counter+1, release) is written
against these, so every lock design (Redlock, the single-instance lock, the
SETNX/GETSET pattern, or no lock at all in fence-only mode) and every store
(the gateway with the fence on or off) plugs in without the workload knowing
which it has. `until` is CLOCK_MONOTONIC seconds, the clock every process on
the machine shares, so the checker can compare it with other clients' events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol


@dataclass(frozen=True)
class LeaseInfo:
    """One acquisition: who holds `resource`, with which token, valid until when (monotonic)."""

    resource: str
    owner: str  # the value the lock stored; how a holder recognises its own lock
    token: int | None = None  # the fencing token, in the modes that draw one
    until: float | None = None  # validity end by the holder's own clock; None: no validity claimed


@dataclass(frozen=True)
class StoreReply:
    """The store's answer to one request; `seq` is its acceptance order (None if refused)."""

    outcome: Literal["ok", "refused"]
    value: int | None = None
    seq: int | None = None
    detail: str = ""


class LabLock(Protocol):
    """One acquisition attempt per call; `LockNotAcquired` when the resource is taken."""

    async def acquire(self, resource: str, ttl: float) -> LeaseInfo: ...

    async def release(self, lease: LeaseInfo) -> bool: ...

    async def aclose(self) -> None: ...


class CounterStore(Protocol):
    """The shared counter behind the store, read and written under a lease.

    A refusal (stale token) is a reply, not an exception: it is the fence doing
    its job. Transport failures raise, and the workload records them as errors.
    """

    async def read(self, lease: LeaseInfo) -> StoreReply: ...

    async def write(self, value: int, lease: LeaseInfo) -> StoreReply: ...

    async def final(self) -> int: ...

    async def aclose(self) -> None: ...
