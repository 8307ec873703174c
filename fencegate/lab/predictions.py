"""What the seed documents predict for a run: which faults break which lock design when it stands alone.

A lock alone (`lock-only`) is unsafe exactly under the faults its design
cannot see (`BREAKS`): every lease design under a pause or a delayed packet;
the Redis designs under a lost key (a restart without persistence, a
failover) and Redis's wall clock (a jump expires the key, except for the
SETNX/GETSET pattern, which keeps its expiry in the value); that pattern
alone under the clients' own clocks disagreeing (clock skew). A fence is
safe under all of them, unless its tokens go back (token-regress with the
redis INCR source). Pure: the report and `lab report` use it on recorded
histories, the runs use it before they start.
"""

from __future__ import annotations

from typing import Protocol

INCR = "incr"  # the token source is a redis INCR on the node the scenario chooses (it goes back)
REGRESS = "token-regress"
LOCK_ONLY = "lock-only"

_LEASES = frozenset({"pause", "delay"})  # no lease protects a holder that stalls, or a request that lingers
_REDIS_KEY = frozenset({"restart", "failover"})  # a node that forgets the key
BREAKS: dict[str, frozenset[str]] = {
    "redlock": _LEASES | _REDIS_KEY | {"clock-jump"},
    "single": _LEASES | _REDIS_KEY | {"clock-jump"},
    "setnx-getset": _LEASES | _REDIS_KEY | {"clock-skew"},
}


class Described(Protocol):
    """A run as planned (`RunSpec`) or as recorded (`Meta`): what the prediction depends on."""

    @property
    def scenario(self) -> str: ...

    @property
    def mode(self) -> str: ...

    @property
    def lock(self) -> str: ...

    @property
    def tokens(self) -> str | None: ...


def expected_safe(run: Described) -> bool:
    """The verdict the seed documents predict for `run`."""
    if run.mode != LOCK_ONLY:
        return not (run.scenario == REGRESS and run.tokens == INCR)
    return run.scenario not in BREAKS.get(run.lock, frozenset())


__all__ = ["BREAKS", "INCR", "LOCK_ONLY", "REGRESS", "expected_safe"]
