"""The keywords of a Redlock and of every acquire, each set written once.

`Redlock.acquire`, `lock` and `locked`, and the same three of the blocking
`lockclient.sync.Redlock`, all take `**options: Unpack[AcquireOptions]` and
hand them down unchanged to `Redlock.acquire`, the one place that reads them
and applies their defaults. A new option is one key here and its use there;
type checkers still check every keyword a caller writes. `RedlockOptions`
does the same for the constructor keywords that the async `Redlock`'s
overloads and the sync facade share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, TypedDict

from lockclient.config import RetryPolicy, TLSSettings
from lockclient.lease import Lease, TokenT
from lockclient.protocols import Clock

__all__ = ["AcquireOptions", "OnLost", "RedlockOptions", "check_options"]

OnLost = Callable[[Lease[TokenT]], object]


class RedlockOptions(TypedDict, total=False):
    """The keywords of `lockclient.Redlock` besides `tokens` and `observer`; their defaults are the
    constructor's."""

    ttl: float
    node_timeout: float
    retry: RetryPolicy
    clock: Clock
    drift_factor: float
    max_extensions: int
    watchdog_fraction: float
    reentrant: bool
    key_prefix: str
    tls: TLSSettings | None


class AcquireOptions(TypedDict, Generic[TokenT], total=False):
    """How one acquire waits and what it starts; each key may be left out (its default in brackets).

    ttl          seconds the lease lives [the Redlock's `ttl`]
    blocking     False tries once [True]
    timeout      seconds to keep trying; None: no limit; 0: one attempt, as blocking=False [None]
    auto_extend  start the watchdog that renews the lease until it is released [False]
    on_lost      called once, on the event loop, when the lease is known lost [None]
    """

    ttl: float | None
    blocking: bool
    timeout: float | None
    auto_extend: bool
    on_lost: OnLost[TokenT] | None


def check_options(
    options: Mapping[str, object], *, where: str, known: frozenset[str] = AcquireOptions.__optional_keys__
) -> None:
    """Refuse a keyword not in `known` (`AcquireOptions`'), as Python refuses one a signature lacks:
    `**options` would otherwise swallow a misspelt `timout=` and wait forever."""
    for name in options.keys() - known:
        raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
