"""What the lab's workload needs from a lock and from the store, as small Protocols.

`Deployment` is what a scenario run needs from a mode and lock design: how
each client process builds its lock and its store, each a `Component` (a
factory named by import path, so it crosses to the client process as JSON).

The workload (acquire, read counter, write counter+1, release) is written
against these, so every lock design (Redlock, the single-instance lock, the
SETNX/GETSET pattern, or no lock at all in fence-only mode) and every store
(the gateway with the fence on or off) plugs in without the workload knowing
which it has. `until` is CLOCK_MONOTONIC seconds, the clock every process on
the machine shares, so the checker can compare it with other clients' events.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from fencegate.lab.errors import RunnerError


@dataclass(frozen=True)
class Component:
    """A factory by import path ("package.module:function") and its keyword arguments."""

    factory: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def build(self) -> Any:
        module_name, _, attr = self.factory.partition(":")
        if not attr:
            raise RunnerError(
                f"factory {self.factory!r} must look like 'package.module:function'", client="lab"
            )
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise RunnerError(f"cannot import factory {self.factory!r}: {exc}", client="lab") from exc
        return factory(**self.kwargs)


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


class Deployment(Protocol):
    """The mode and lock design under test: what each client process builds."""

    @property
    def lock_nodes(self) -> int:
        """How many redis nodes the lock design uses (1, 5 for Redlock, 0 for etcd: its cluster is the
        session's)."""
        ...

    @property
    def store_address(self) -> tuple[str, int]:
        """Where the store listens (host, port); the delay scenario puts a proxy in front."""
        ...

    def lock(self, urls: Sequence[str], *, tokens: str) -> Component:
        """The lock over the lab's redis `urls`; `tokens` is a redis URL the lab started for a Redis
        INCR token source (the faulted lock node itself in token-regress); other sources ignore it."""
        ...

    def store(self, address: tuple[str, int]) -> Component: ...

    async def final(self) -> int: ...


@runtime_checkable
class HeldPath(Protocol):
    """A deployment of several gateway replicas, one of which reaches its store through a path the
    scenario can hold (`lab.proxy_deployment`): each client is told which replica it sends to."""

    def address_for(self, client: str) -> tuple[str, int]:
        """The replica `client` sends its requests to."""
        ...

    def hold_path(self, seconds: float) -> None:
        """Hold the held replica's requests to the store this long (0: let them through)."""
        ...

    async def delete(self, token: int) -> None:
        """Delete the counter through the other replica, fenced by `token` (a newer lease's)."""
        ...

    async def recreate(self, value: int, token: int) -> None:
        """Write the counter back through the other replica, fenced by `token`."""
        ...
