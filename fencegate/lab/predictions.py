"""What the seed documents predict for a run: which faults break which lock design when it stands alone.

A lock alone (`lock-only`) is unsafe exactly under the faults its design
cannot see (`BREAKS`): every lease design under a pause or a delayed packet;
the Redis designs under a lost key (a restart without persistence, a
failover) and Redis's wall clock (a jump expires the key, except for the
SETNX/GETSET pattern, which keeps its expiry in the value); that pattern
alone under the clients' own clocks disagreeing (clock skew). The etcd
design (a session lease kept alive by its client) only under a pause: its
lease lives on etcd's clock, so a client's clock, a redis node's memory or
clock cannot touch it, but a client that stops cannot keep it alive (what
Jepsen saw in etcd 3.4.3). A fence is safe under all of them, unless its
tokens go back (token-regress with the redis INCR source).

Not every scenario applies to every design (`INAPPLICABLE`): the faults of
a redis lock node have nothing to hit in etcd, and a delayed write cannot
let a challenger in while the etcd session keeps its lease alive. The
stores other than the gateway (`STORE_SCENARIOS`) run the scenarios that
ask their own question: a user's table sees a paused holder's stale write
exactly as the gateway does, and the faults of a lock node hit the lock,
whatever store is behind it. The s3 stores (two gateway replicas in front of
SeaweedFS) run `proxy-delay` and `proxy-delete` alone, the scenarios about
the path between a gateway and its store, and only they run them: the unconditional proxy is
unsafe there, the conditional one safe; `proxy-delete` is the same with the
newer lease's delete before the held write arrives (the tombstone's case). Pure: the
report and `lab report` use it on recorded histories, the runs use it
before they start.
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
    "etcd": frozenset({"pause"}),
}
_REDIS_NODE = (
    "faults a redis lock node (its memory, clock, replica or INCR); the etcd design keeps its lock in the "
    "Raft log of 3 etcd members"
)
# design -> scenario -> why the scenario cannot run on that design
INAPPLICABLE: dict[str, dict[str, str]] = {
    "etcd": {
        "delay": "holds the write until another client wrote, but the etcd session keeps its lease alive "
        "meanwhile, so no other client ever gets the lock",
        **{name: _REDIS_NODE for name in ("clock-jump", "restart", "restart-delayed", "failover", REGRESS)},
    },
}

GATEWAY = "gateway"  # the store of every scenario: the built-in store behind the gateway
# store -> the scenarios its rows run (the others are the gateway's rows; see docs/decisions.md)
_SQL_ROWS = frozenset({"none", "pause"})
PROXY_DELAY = "proxy-delay"  # the scenario whose fault sits between a gateway replica and its store
UNCONDITIONAL = "s3-unconditional"  # the s3 store whose replicas send writes without preconditions
PROXY_DELETE = "proxy-delete"  # the same, with the newer lease's delete before the held write arrives
PROXY_SCENARIOS = frozenset({PROXY_DELAY, PROXY_DELETE})
PROXY_STORES = ("s3", UNCONDITIONAL)
STORE_SCENARIOS: dict[str, frozenset[str]] = {
    "sql": _SQL_ROWS,
    "sql-trigger": _SQL_ROWS,
    **{store: PROXY_SCENARIOS for store in PROXY_STORES},
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

    @property
    def store(self) -> str: ...


def inapplicable(design: str, scenario: str) -> str | None:
    """Why `scenario` cannot run on `design` (None: it can)."""
    return INAPPLICABLE.get(design, {}).get(scenario)


def store_inapplicable(store: str, scenario: str) -> str | None:
    """Why `scenario` has no row on `store` (None: it has)."""
    if scenario in PROXY_SCENARIOS and store not in PROXY_STORES:
        return (
            f"has no row on the {store} store: it holds the path between a gateway replica and an S3 "
            f"store, so it runs on the {' and '.join(PROXY_STORES)} stores"
        )
    runs = STORE_SCENARIOS.get(store)
    if runs is None or scenario in runs:
        return None
    if store in PROXY_STORES:
        return f"has no row on the {store} store, which runs {PROXY_DELAY} and {PROXY_DELETE} only"
    return (
        f"has no row on the {store} store, which runs {', '.join(sorted(runs))}: the faults of a lock node "
        "hit the lock, whatever store is behind it, and the gateway's rows show them"
    )


def expected_safe(run: Described) -> bool:
    """The verdict the seed documents predict for `run`."""
    if run.scenario in PROXY_SCENARIOS:  # the held write meets the store after the challenger's
        return run.store != UNCONDITIONAL
    if run.mode != LOCK_ONLY:
        return not (run.scenario == REGRESS and run.tokens == INCR)
    return run.scenario not in BREAKS.get(run.lock, frozenset())


__all__ = [
    "BREAKS",
    "GATEWAY",
    "INAPPLICABLE",
    "INCR",
    "LOCK_ONLY",
    "PROXY_DELAY",
    "PROXY_DELETE",
    "PROXY_SCENARIOS",
    "PROXY_STORES",
    "REGRESS",
    "STORE_SCENARIOS",
    "UNCONDITIONAL",
    "expected_safe",
    "inapplicable",
    "store_inapplicable",
]
