"""What the model can be asked: the protocol variants, the properties, the sizes.

The variants mirror the lab's modes, plus designs that DESIGN.md and
STYLE.md reject, so the model can show what each allows: the token drawn
after the quorum, the validity clock started after the token is drawn, a
fence that compares and raises the mark in two steps, reads that skip the
fence, a token source that goes back, and a key fenced by whichever resource a request names (then the key
bound to one resource, as fencegate does, and that binding made only by the
write creating the key, or dropped by a delete). The proxy variants are a
second model, proxy.pml: the path from the gateway's replicas to an upstream
store, which may hold and reorder requests and deliver one the gateway
stopped waiting for; they have properties of their own, read at the store.
Each property is searched in a run of its own: pan stops at the first error,
and one property's counterexample must not hide another's verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fencegate.model.errors import ModelArgumentError

LOCK_MODEL = "fencegate.pml"  # Redlock leases, tokens and the gateway's fence
PROXY_MODEL = "proxy.pml"  # the path between the gateway and an upstream store


@dataclass(frozen=True)
class Variant:
    name: str
    macro: str  # the -D that selects it in fencegate.pml
    lock: bool  # takes a Redlock lease
    fence: bool  # requests carry a token and pass the fence
    summary: str
    shipped: bool = False  # a design fencegate implements (the others are baselines or rejected)
    model: str = LOCK_MODEL  # the Promela file that holds it


@dataclass(frozen=True)
class Property:
    name: str
    claim: str  # the ltl block in fencegate.pml, chosen with ./pan -N
    promised: bool  # part of what fencing promises (DESIGN.md); the others explain
    summary: str
    model: str = LOCK_MODEL  # the Promela file whose ltl block it is


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("redis-only", "REDIS_ONLY", True, False, "Redlock lease, then read and write unchecked"),
        Variant(
            "fenced", "FENCED", True, True, "token drawn before the quorum, requests fenced", shipped=True
        ),
        Variant(
            "fenced-late-clock",
            "FENCED_LATE_CLOCK",
            True,
            True,
            "like fenced, but the lease's validity clock starts after the token is drawn",
        ),
        Variant(
            "split-fence",
            "SPLIT_FENCE",
            True,
            True,
            "like fenced, but the gateway reads the mark, compares, then writes in a later step",
        ),
        Variant(
            "unfenced-reads",
            "UNFENCED_READS",
            True,
            True,
            "like fenced, but reads carry no token: only writes pass the fence",
        ),
        Variant("fence-only", "FENCE_ONLY", False, True, "token and fence, no lock", shipped=True),
        Variant("token-after", "TOKEN_AFTER", True, True, "like fenced, token drawn after the quorum"),
        Variant(
            "token-regress",
            "TOKEN_REGRESS",
            True,
            True,
            "like fenced, but the token source may restart without its counter and issue "
            "tokens from 1 again (the lab's Redis INCR source)",
        ),
        Variant(
            "any-resource",
            "ANY_RESOURCE",
            True,
            True,
            "like fenced, but each request names the lock or the key as its resource and passes "
            "that resource's mark only (the gateway before objects were bound to a resource)",
        ),
        Variant(
            "bound-resource",
            "BOUND_RESOURCE",
            True,
            True,
            "like any-resource, but the key belongs to the resource it was first fenced under: "
            "a request naming another is refused, and a delete keeps the binding",
            shipped=True,
        ),
        Variant(
            "bound-on-create",
            "BOUND_ON_CREATE",
            True,
            True,
            "like bound-resource, but only the write that creates the key binds it, "
            "not a fenced read of the absent key",
        ),
        Variant(
            "bound-until-delete",
            "BOUND_UNTIL_DELETE",
            True,
            True,
            "like bound-resource, but a delete frees the key for any resource (no tombstone)",
        ),
        Variant(
            "proxy-trust-path",
            "TRUST_PATH",
            False,
            True,
            "the gateway fences in its database and forwards; the store applies whatever arrives, "
            "in the order it arrives (--upstream-ordering trust-path)",
            model=PROXY_MODEL,
        ),
        Variant(
            "proxy-conditional",
            "CONDITIONAL",
            False,
            True,
            "every request sent is conditional on the version the gateway checked (If-Match, "
            "If-None-Match: *); a 412 is read and decided again; a delete writes a tombstone "
            "carrying its token, conditional the same way",
            shipped=True,
            model=PROXY_MODEL,
        ),
        Variant(
            "proxy-no-tombstone",
            "NO_TOMBSTONE",
            False,
            True,
            "like proxy-conditional, but a delete removes the object (DELETE If-Match the "
            "checked ETag) and leaves no version behind",
            model=PROXY_MODEL,
        ),
        Variant(
            "proxy-blind-delete",
            "BLIND_DELETE",
            False,
            True,
            "like proxy-conditional, but the tombstone is written unconditionally",
            model=PROXY_MODEL,
        ),
        Variant(
            "proxy-bare-tombstone",
            "BARE_TOMBSTONE",
            False,
            True,
            "like proxy-conditional, but the tombstone carries no token",
            model=PROXY_MODEL,
        ),
        Variant(
            "proxy-increments",
            "INCREMENTS",
            False,
            True,
            "proxy-conditional under the lab's workload: each request a fenced GET of the counter, "
            "then a PUT of the value read + 1",
            model=PROXY_MODEL,
        ),
        Variant(
            "proxy-read-raises",
            "READ_RAISES",
            False,
            True,
            "like proxy-increments, but a fenced GET whose token is above the stored one first "
            "writes that token onto the version it read (same bytes, If-Match its ETag)",
            model=PROXY_MODEL,
        ),
        Variant(
            "proxy-if-match",
            "CLIENT_MATCH",
            False,
            True,
            "proxy-increments with the client's own If-Match: its PUT is conditional on the ETag "
            "its GET read; another version is 412, never sent again on it",
            shipped=True,
            model=PROXY_MODEL,
        ),
    )
}

PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        Property(
            "interleave",
            "interleave",
            True,
            "no request of lease A accepted after one of a later lease B (token order where "
            "leases carry tokens, acquisition order otherwise: the lab checker's rule)",
        ),
        Property(
            "lost-update",
            "lost_update",
            True,
            "at the end, the counter equals the increments the store acknowledged",
        ),
        Property("mark", "mark_monotone", True, "the fence's high-water mark never decreases"),
        Property(
            "grant-order",
            "grant_order",
            False,
            "the store accepts leases in the order the lock granted them (not promised: "
            "it shows which party the fence sides with when two leases overlap)",
        ),
        Property(
            "store-order",
            "store_order",
            True,
            "the store never applies a request (write, delete, tombstone) with a lower token "
            "than one it applied before",
            model=PROXY_MODEL,
        ),
        Property(
            "no-recreate",
            "no_recreate",
            True,
            "no write makes the key exist again with a lower token than a delete already done",
            model=PROXY_MODEL,
        ),
        Property(
            "acked-durable",
            "acked_durable",
            True,
            "once every client has its answers, the store holds a state at least as new as every "
            "request answered 2xx, and keeps it while held requests still land",
            model=PROXY_MODEL,
        ),
        Property(
            "increments",
            "increments",
            True,
            "once every client has its answers, the counter at the store holds every increment "
            "answered 2xx (vacuous where clients write blind)",
            model=PROXY_MODEL,
        ),
    )
}


def applicable(variant: str, props: list[str]) -> list[str]:
    """The properties among `props` that the variant's model defines."""
    return [p for p in props if PROPERTIES[p].model == VARIANTS[variant].model]


def promised(variant: str) -> set[str]:
    """The promised properties of the variant's model: what `safe` requires."""
    return {name for name, p in PROPERTIES.items() if p.promised and p.model == VARIANTS[variant].model}


@dataclass(frozen=True, kw_only=True)
class Sizes:
    """The bounds of one search; every state the bounds allow is explored."""

    clients: int = 2
    nodes: int = 3
    ops: int = 1  # acquisitions per client
    # times a whole TTL may pass (pauses, delays); in proxy.pml, requests the gateway stops waiting for
    pauses: int = 1
    node_faults: int = 1  # node restarts or clock jumps (token-regress: token source restarts), in total

    def __post_init__(self) -> None:
        if not 1 <= self.clients <= 3:
            raise ModelArgumentError(f"--clients {self.clients}: the model is sized for 1 to 3 clients")
        if self.nodes not in (1, 3, 5):
            raise ModelArgumentError(f"--nodes {self.nodes}: use 1, 3 or 5 Redis masters (an odd quorum)")
        if not 1 <= self.ops <= 3:
            raise ModelArgumentError(f"--ops {self.ops}: use 1 to 3 acquisitions per client")
        if not 0 <= self.pauses <= 3 or not 0 <= self.node_faults <= 3:
            raise ModelArgumentError(
                "--pauses and --node-faults take 0 to 3 (each adds a dimension to the search)"
            )

    def macros(self) -> list[str]:
        return [
            f"-DK={self.clients}",
            f"-DN={self.nodes}",
            f"-DOPS={self.ops}",
            f"-DMAXT={self.pauses}",
            f"-DMAXF={self.node_faults}",
        ]

    def label(self, model: str = LOCK_MODEL) -> str:
        if model == PROXY_MODEL:  # no lock: no masters and no node faults
            return f"K={self.clients} ops={self.ops} timeouts={self.pauses}"
        return (
            f"K={self.clients} N={self.nodes} ops={self.ops} "
            f"pauses={self.pauses} node-faults={self.node_faults}"
        )


def pick(names: str, table: Mapping[str, object], what: str) -> list[str]:
    """Comma-separated names (or `all`) checked against a table, in the table's order."""
    if names == "all":
        return list(table)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in table]
    if unknown or not wanted:
        raise ModelArgumentError(
            f"unknown {what} {unknown or names!r}: choose from {', '.join(table)} or all"
        )
    return [n for n in table if n in wanted]


__all__ = [
    "LOCK_MODEL",
    "PROPERTIES",
    "PROXY_MODEL",
    "VARIANTS",
    "Property",
    "Sizes",
    "Variant",
    "applicable",
    "pick",
    "promised",
]
