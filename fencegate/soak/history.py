"""What the soak recorded, and the checker that proves the invariants over all of it.

Every client loops: take a Redlock lease on a resource, read its counter
with a fenced GET, write counter + 1 with a PUT carrying the same token,
release. Each HTTP request is one `Call`. Because the fenced read raises the
mark, no other write can land between a lease's read and its accepted write,
so in commit order (the object's version) the counter must equal its
version. The checker turns that and DESIGN.md's invariants into counts:

- invariant 1: per key, accepted PUTs ordered by version carry non-decreasing tokens;
- invariant 2: every accepted PUT wrote exactly version = value (a refused
  write that had changed something would break the chain), and the final
  bytes of each key were sent by an accepted or unknown-outcome request,
  never by a refused one;
- invariant 3: marks polled one after the other never go down, and the final
  mark is at least every accepted token;
- invariant 4: no 2xx for a request that started and ended inside a storage outage;
- acknowledged writes lost: an accepted PUT whose version is above the final
  one, or that the audit trail (written in the same transaction) lacks.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Call:
    """One HTTP request of the load: what was sent and what came back (status None: no answer)."""

    client: int
    gateway: int
    method: str
    key: str
    token: int
    body: bytes
    start: float
    end: float
    status: int | None
    version: int | None = None


@dataclass(frozen=True, slots=True)
class Final:
    """A key's state after the run, read through a gateway."""

    body: bytes | None
    version: int | None
    mark: int


@dataclass
class History:
    calls: list[Call] = field(default_factory=list)
    marks: list[tuple[str, int]] = field(default_factory=list)  # (resource, mark) in poll order
    outages: list[tuple[float, float]] = field(default_factory=list)  # storage down, [start, end)
    lock_failures: int = 0
    pauses: int = 0  # holders that paused past their lease before writing


@dataclass
class Verdict:
    """Counts the soak's table prints; `lost` and `violations` must be 0."""

    requests: int
    rate: float
    p50_ms: float
    p99_ms: float
    refusals: Counter[int]
    errors: Counter[str]
    lost: int
    violations: list[str]


def value_of(body: bytes) -> int:
    """The counter a write carried (`b"<value> <client> <seq>"`)."""
    return int(body.split()[0])


def check(
    history: History, finals: dict[str, Final], audited: Counter[tuple[str, int]], elapsed: float
) -> Verdict:
    """Check the history against the final state and the audit trail's accepted PUTs per (key, token)."""
    calls = history.calls
    violations: list[str] = []
    accepted = [c for c in calls if c.method == "PUT" and c.status in (200, 201)]
    unknown_bodies = {c.body for c in calls if c.method == "PUT" and (c.status is None or c.status >= 500)}
    refused_bodies = {
        c.body for c in calls if c.method == "PUT" and c.status is not None and 400 <= c.status < 500
    }

    by_key: dict[str, list[Call]] = defaultdict(list)
    for call in accepted:
        by_key[call.key].append(call)
    for key, writes in by_key.items():
        writes.sort(key=lambda c: c.version or 0)
        tokens = [c.token for c in writes]
        if tokens != sorted(tokens):
            violations.append(
                f"invariant 1: {key}: accepted tokens in version order went back: {tokens[:20]}"
            )
        versions = [c.version for c in writes]
        if len(set(versions)) != len(versions):
            violations.append(f"invariant 2: {key}: two accepted writes got the same version")
        for c in writes:
            if value_of(c.body) != c.version:
                violations.append(
                    f"invariant 2: {key}: value {value_of(c.body)} written as version {c.version}"
                )

    lost = 0
    acked: Counter[tuple[str, int]] = Counter((c.key, c.token) for c in accepted)
    for (key, token), count in acked.items():
        if audited[(key, token)] < count:
            lost += count - audited[(key, token)]
    for key, writes in by_key.items():
        final = finals[key]
        top = max(c.version or 0 for c in writes)
        if final.version is None or final.version < top:
            lost += 1
            violations.append(f"lost: {key}: final version {final.version} below acknowledged version {top}")
        if final.mark < max(c.token for c in writes):
            violations.append(f"invariant 3: {key}: final mark {final.mark} below an accepted token")
    for key, final in finals.items():
        if final.body is None:
            continue
        if final.body in refused_bodies:
            violations.append(f"invariant 2: {key}: final bytes come from a refused request")
        elif final.body not in {c.body for c in by_key.get(key, [])} | unknown_bodies:
            violations.append(f"invariant 2: {key}: final bytes were never sent by an accepted request")
        if final.version is not None and value_of(final.body) != final.version:
            violations.append(
                f"invariant 2: {key}: final value {value_of(final.body)} at version {final.version}"
            )

    seen: dict[str, int] = {}
    for resource, mark in history.marks:
        if mark < seen.get(resource, 0):
            violations.append(f"invariant 3: {resource}: mark went from {seen[resource]} to {mark}")
        seen[resource] = max(mark, seen.get(resource, 0))

    for call in calls:
        if call.status is not None and 200 <= call.status < 300:
            for start, end in history.outages:
                if start <= call.start and call.end <= end:
                    violations.append(
                        f"invariant 4: {call.method} {call.key} answered {call.status} during an outage"
                    )

    latencies = sorted((c.end - c.start) * 1000 for c in calls if c.status is not None)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else 0.0
    errors: Counter[str] = Counter(
        "no answer" if c.status is None else str(c.status)
        for c in calls
        if c.status is None or c.status >= 500
    )
    return Verdict(
        requests=len(calls),
        rate=len(calls) / elapsed if elapsed else 0.0,
        p50_ms=statistics.median(latencies) if latencies else 0.0,
        p99_ms=p99,
        refusals=Counter(c.status for c in calls if c.status is not None and 400 <= c.status < 500),
        errors=errors,
        lost=lost,
        violations=violations,
    )
