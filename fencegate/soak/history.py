"""What the soak recorded, and the checker that proves the invariants over all of it.

Every client loops: take a Redlock lease on a resource, read its counter
with a fenced GET, write counter + 1 with a PUT carrying the same token,
release. Each HTTP request is one `Call`. Because the fenced read raises the
mark, no other write can land between a lease's read and its accepted write,
so in commit order (the object's version) the counter must equal its
version. The checker turns that and DESIGN.md's invariants into counts:

- invariant 1: per key, accepted PUTs ordered by version carry non-decreasing tokens;
  per resource, a PUT first sent after another was acknowledged carries no lower token;
- invariant 2: every accepted PUT wrote exactly version = value (a refused
  write that had changed something would break the chain), and the final
  bytes of each key were sent by an accepted or unknown-outcome request,
  never by a refused one;
- invariant 3: marks polled one after the other never go down, and the final
  mark is at least every accepted token;
- invariant 4: no 2xx for a request that started and ended inside a storage outage;
- acknowledged writes lost: an accepted PUT whose version is above the final
  one, or that the audit trail (written in the same transaction) lacks.

Every PUT carries an `Idempotency-Key` and is retried with it (same token,
same body) while its answer is a 5xx (but 501) or nothing. So, per write:
the audit trail holds at most one accepted row for its (key, token), exactly
one if it was acknowledged, and every 2xx its attempts got is the same answer.

The unleased writers (writers.py) write each key once: an acknowledged key
must hold the acknowledged bytes and version after the run, and a key whose
write was refused must not exist.
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
    idempotency_key: str = ""  # the same on every attempt of one write
    answer: bytes = b""  # the body of a 2xx (a PUT's is compared across its retries)
    resource: str = ""  # the Fencing-Resource sent ("": the key)


@dataclass(frozen=True, slots=True)
class Final:
    """A key's state after the run, read through a gateway."""

    body: bytes | None
    version: int | None
    mark: int


@dataclass
class SoakHistory:
    calls: list[Call] = field(default_factory=list)  # the leased clients'
    unleased: list[Call] = field(default_factory=list)  # the unleased writers' (fresh keys, see writers.py)
    marks: list[tuple[str, int]] = field(default_factory=list)  # (resource, mark) in poll order
    outages: list[tuple[float, float]] = field(default_factory=list)  # storage down, [start, end)
    lock_failures: int = 0
    pauses: int = 0  # holders that paused past their lease before writing


@dataclass
class Retries:
    """How the writes' retries went; `applied_twice` and `answers_differ` must be empty."""

    writes: int = 0  # writes that took more than one attempt
    attempts: int = 0  # attempts after the first
    unknown: int = 0  # writes still without a definite answer at their deadline
    applied_twice: list[str] = field(default_factory=list)
    answers_differ: list[str] = field(default_factory=list)


@dataclass
class SoakVerdict:
    """Counts the soak's table prints; `lost` and `violations` must be 0."""

    requests: int
    rate: float
    fault_rate: float  # definite answers (below 500) per second from the first fault to the last one's end
    unleased_acked: int
    retries: Retries
    p50_ms: float
    p99_ms: float
    refusals: Counter[int]
    errors: Counter[str]
    lost: int
    violations: list[str]


def value_of(body: bytes) -> int:
    """The counter a write carried (`b"<value> <client> <seq>"`)."""
    return int(body.split()[0])


def accepted_writes(calls: list[Call]) -> list[Call]:
    """One accepted call per write: a retried write's later 2xx repeat its first (checked in `retries`)."""
    seen: set[str] = set()
    accepted = []
    for c in calls:
        if c.method != "PUT" or c.status not in (200, 201) or c.idempotency_key in seen:
            continue
        if c.idempotency_key:
            seen.add(c.idempotency_key)
        accepted.append(c)
    return accepted


def retries(calls: list[Call], audited: Counter[tuple[str, int]]) -> Retries:
    """Each write (its attempts share an Idempotency-Key) applied at most once, its 2xx answers all alike."""
    writes: dict[str, list[Call]] = defaultdict(list)
    for c in calls:
        if c.method == "PUT" and c.idempotency_key:
            writes[c.idempotency_key].append(c)
    found = Retries()
    for idem, attempts in writes.items():
        first = attempts[0]
        if len(attempts) > 1:
            found.writes += 1
            found.attempts += len(attempts) - 1
        if all(a.status is None or a.status >= 500 for a in attempts):
            found.unknown += 1
        if audited[(first.key, first.token)] > 1:
            found.applied_twice.append(
                f"retries: {idem}: applied {audited[(first.key, first.token)]} times (accepted audit rows)"
            )
        answers = {(a.status, a.answer) for a in attempts if a.status in (200, 201)}
        if len(answers) > 1:
            found.answers_differ.append(f"retries: {idem}: its attempts got different 2xx answers: {answers}")
    return found


def check_unleased(
    calls: list[Call], objects: dict[str, tuple[bytes, int]], audited: Counter[tuple[str, int]]
) -> tuple[int, int, list[str]]:
    """(acknowledged, lost, violations) of the unleased writers against `objects` (key: bytes, version)."""
    acked = accepted_writes(calls)
    lost, violations = 0, []
    for c in acked:
        stored = objects.get(c.key)
        if stored is None or stored != (c.body, c.version) or audited[(c.key, c.token)] < 1:
            lost += 1
            violations.append(
                f"lost: {c.key}: acknowledged version {c.version}, stored {stored and stored[1]}"
            )
    violations += stale_accepted(calls, acked)
    acked_keys = {c.key for c in acked}
    refused = {
        c.key for c in calls if c.status is not None and 400 <= c.status < 500 and c.key not in acked_keys
    }
    violations += [
        f"invariant 2: {key}: its write was refused, yet the key exists" for key in refused & set(objects)
    ]
    return len(acked), lost, violations


def stale_accepted(calls: list[Call], acked: list[Call]) -> list[str]:
    """Invariant 1 seen from the clients, per resource: a write first sent after another was
    acknowledged commits after it, so its token may not be lower. Needs no audit trail, so a gateway
    that accepts stale tokens is caught even if it keeps its marks and its trail in order."""
    first_sent: dict[str, float] = {}  # per write with a key: its first attempt's start
    for c in calls:
        if c.idempotency_key:  # its commit may come from any attempt; a call without a key is its own
            first_sent[c.idempotency_key] = min(c.start, first_sent.get(c.idempotency_key, c.start))
    by_resource: dict[str, list[Call]] = defaultdict(list)
    for c in acked:
        by_resource[c.resource or c.key].append(c)
    found = []
    for resource, writes in by_resource.items():
        done = sorted(writes, key=lambda c: c.end)
        newest: Call | None = None  # the highest token acknowledged so far
        i = 0
        for c in sorted(writes, key=lambda c: first_sent.get(c.idempotency_key, c.start)):
            while i < len(done) and done[i].end < first_sent.get(c.idempotency_key, c.start):
                if newest is None or done[i].token > newest.token:
                    newest = done[i]
                i += 1
            if newest is not None and c.token < newest.token:
                found.append(
                    f"invariant 1: {resource}: {c.key} with token {c.token} accepted after "
                    f"{newest.key} with token {newest.token} was acknowledged"
                )
    return found


def check(
    history: SoakHistory,
    finals: dict[str, Final],
    audited: Counter[tuple[str, int]],
    elapsed: float,
    *,
    objects: dict[str, tuple[bytes, int]],
    fault_window: tuple[float, float] | None = None,
) -> SoakVerdict:
    """Check the history against the final state, the unleased writers' stored `objects` and the
    audit trail's accepted PUTs per (key, token); `fault_window`: the faults' span, seconds into the run."""
    calls = history.calls
    violations: list[str] = []
    accepted = accepted_writes(calls)
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

    unleased_acked, lost, unleased_violations = check_unleased(history.unleased, objects, audited)
    violations += unleased_violations
    retried = retries(calls + history.unleased, audited)
    violations += retried.applied_twice + retried.answers_differ
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

    everything = calls + history.unleased
    for call in everything:
        if call.status is not None and 200 <= call.status < 300:
            for start, end in history.outages:
                if start <= call.start and call.end <= end:
                    violations.append(
                        f"invariant 4: {call.method} {call.key} answered {call.status} during an outage"
                    )

    latencies = sorted((c.end - c.start) * 1000 for c in everything if c.status is not None)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else 0.0
    errors: Counter[str] = Counter(
        "no answer" if c.status is None else str(c.status)
        for c in everything
        if c.status is None or c.status >= 500
    )
    fault_rate = 0.0
    if fault_window is not None and fault_window[1] > fault_window[0]:
        start, end = fault_window
        # A 503 is the gateway giving up, not load it held: counted, it would pass a gateway that
        # fails fast under faults (the burst it is compared with had no non-2xx).
        answered = sum(
            1 for c in everything if c.status is not None and c.status < 500 and start <= c.end < end
        )
        fault_rate = answered / (end - start)
    return SoakVerdict(
        requests=len(everything),
        rate=len(everything) / elapsed if elapsed else 0.0,
        fault_rate=fault_rate,
        unleased_acked=unleased_acked,
        retries=retried,
        p50_ms=statistics.median(latencies) if latencies else 0.0,
        p99_ms=p99,
        refusals=Counter(c.status for c in everything if c.status is not None and 400 <= c.status < 500),
        errors=errors,
        lost=lost,
        violations=violations,
    )
