"""A spin (Promela) model of fencegate's protocol, and the runner that checks it.

The lab samples real runs; this package checks every interleaving of a small
system: clients taking Redlock leases over N Redis masters with TTL expiry,
the token source, the gateway's fence and a read-modify-write counter,
against an adversary that pauses clients past their TTL, delays messages,
restarts nodes without their keys, jumps node clocks and (in one variant)
restarts the token source without its counter. A second model (proxy.pml)
checks the path from the gateway's replicas to an upstream store, which holds,
reorders and delivers late the requests the gateway forwards. `fencegate
model check` runs both; a counterexample comes back as the lab's history events.
"""

from fencegate.model.errors import BuildError, ModelError, SearchError, ToolMissing, TrailError
from fencegate.model.pan import PanReport, parse_pan
from fencegate.model.runner import CheckResult, check, model_source
from fencegate.model.trail import EVENT_KEYS, Trail, parse_replay
from fencegate.model.variants import PROPERTIES, VARIANTS, Property, Sizes, Variant

__all__ = [
    "EVENT_KEYS",
    "PROPERTIES",
    "VARIANTS",
    "BuildError",
    "CheckResult",
    "ModelError",
    "PanReport",
    "Property",
    "SearchError",
    "Sizes",
    "ToolMissing",
    "Trail",
    "TrailError",
    "Variant",
    "check",
    "model_source",
    "parse_pan",
    "parse_replay",
]
