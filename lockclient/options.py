"""The keywords of a Redlock and of every acquire, each set written once.

`Redlock.acquire`, `lock` and `locked`, and the same three of the blocking
`lockclient.sync.Redlock`, all take `**options: Unpack[AcquireOptions]` and
hand them down unchanged to `Redlock.acquire`, the one place that reads them
and applies their defaults. `check_options`, which each of them calls first,
refuses an unknown keyword (`TypeError`) and a value of the wrong kind
(`ConfigurationError`), before anything is drawn or sent. A new option is one key here and its use there;
type checkers still check every keyword a caller writes. `RedlockOptions`
does the same for the constructor keywords that the async `Redlock`'s
overloads and the sync facade share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, TypedDict

from lockclient.config import RetryPolicy, TLSSettings, is_number, require_positive
from lockclient.errors import ConfigurationError
from lockclient.lease import Lease, TokenT
from lockclient.protocols import Clock

__all__ = [
    "ACQUIRE_KEYS",
    "AcquireOptions",
    "OnLost",
    "RedlockOptions",
    "check_acquire_values",
    "check_options",
]

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


ACQUIRE_KEYS = AcquireOptions.__optional_keys__


def check_options(options: Mapping[str, object], *, where: str, known: frozenset[str] = ACQUIRE_KEYS) -> None:
    """Refuse a keyword not in `known` (`AcquireOptions`'), as Python refuses one a signature lacks:
    `**options` would otherwise swallow a misspelt `timout=` and wait forever. With `AcquireOptions`'
    keys, refuse a value of the wrong kind too (`ConfigurationError`): `blocking="no"` is true, and a
    `timeout="1"` failed only after the first attempt had drawn a token."""
    for name in options.keys() - known:
        raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")
    if known is ACQUIRE_KEYS:  # the gateway client's keyword sets are checked where they are read
        check_acquire_values(options, where=where)


def check_acquire_values(options: Mapping[str, object], *, where: str) -> None:
    """`ConfigurationError` for an `AcquireOptions` value of the wrong kind; the ttl's bound against
    the Redlock's `node_timeout` is `check_ttl`'s, in `acquire`."""
    ttl = options.get("ttl")
    if ttl is not None:
        require_positive(f"{where}() ttl", ttl, "give the lease's time to live in seconds, e.g. 10.0")
    timeout = options.get("timeout")
    if timeout is not None and not (is_number(timeout) and timeout >= 0):  # nan is not >= 0
        raise ConfigurationError(
            f"{where}() timeout must be a number of seconds >= 0 or None, got {timeout!r}: "
            "None waits without a limit, 0 tries once"
        )
    for name in ("blocking", "auto_extend"):
        if name in options and not isinstance(options[name], bool):
            raise ConfigurationError(f"{where}() {name} must be True or False, got {options[name]!r}")
    on_lost = options.get("on_lost")
    if on_lost is not None and not callable(on_lost):
        raise ConfigurationError(
            f"{where}() on_lost must be a function of the lost lease, or None, got {on_lost!r}"
        )
