"""Prometheus metrics of one app, in a registry of its own (never the process-global one).

Two apps in one process (tests, a proxy and a store side by side) must not
share counters, so each `create_app` makes one `Metrics`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# The method label takes these values and "other": the series stay bounded whatever a client sends
# (aiohttp's C parser refuses unknown methods; its pure-Python fallback accepts any token).
METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "PATCH"})

# Fence checks are one short transaction: sub-millisecond on a warm SQLite,
# up to an fsync or a network round trip; the tail is what matters.
FENCE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """The gateway's counters, histogram and gauge."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "fencegate_requests",
            "HTTP requests answered, by route, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.stale_refusals = Counter(
            "fencegate_stale_refusals", "requests refused 409: token below the mark", registry=self.registry
        )
        self.resource_mismatches = Counter(
            "fencegate_resource_mismatches",
            "requests refused 409: the key belongs to another resource",
            registry=self.registry,
        )
        self.idempotent_replays = Counter(
            "fencegate_idempotent_replays",
            "retries answered from their Idempotency-Key's first outcome, applying nothing",
            registry=self.registry,
        )
        self.future_refusals = Counter(
            "fencegate_future_refusals",
            "requests refused 422: token above the source's upper bound",
            registry=self.registry,
        )
        self.token_source_regressed = Counter(
            "fencegate_token_source_regressed",
            "requests answered 503 because a mark is above the token source's upper bound",
            registry=self.registry,
        )
        self.fence_check_seconds = Histogram(
            "fencegate_fence_check_seconds",
            "time of one fenced storage transaction (check and change), accepted or refused",
            buckets=FENCE_BUCKETS,
            registry=self.registry,
        )
        self.audit_dropped = Counter(
            "fencegate_audit_dropped",
            "refusals dropped from the audit trail because storage was unreachable for long",
            registry=self.registry,
        )
        self.idempotency_expired = Counter(
            "fencegate_idempotency_expired",
            "idempotency records deleted past --idempotency-ttl (by this replica)",
            registry=self.registry,
        )
        self.table_rows = Gauge(
            "fencegate_table_rows",
            "rows of each of fencegate's tables (PostgreSQL: the planner's estimate), read every few minutes",
            ["table"],
            registry=self.registry,
        )
        self.table_bytes = Gauge(
            "fencegate_table_bytes",
            "bytes on disk of each of fencegate's tables, indexes included, read every few minutes",
            ["table"],
            registry=self.registry,
        )
        self.marks = Gauge(
            "fencegate_marks", "resources with a high-water mark (updated on scrape)", registry=self.registry
        )
        self.upstream_ordering = Gauge(
            "fencegate_upstream_ordering",
            "proxy mode: 1 for what keeps the upstream's writes in token order (--upstream-ordering)",
            ["mode"],
            registry=self.registry,
        )
        self._answered: dict[tuple[str, str, int], Counter] = {}

    def answered(self, route: str, method: str, status: int) -> None:
        """Count one answer. The labelled child is looked up once per combination, not per request:
        `labels()` validates and locks, a cost every request would pay."""
        key = (route, method if method in METHODS else "other", status)
        child = self._answered.get(key)
        if child is None:
            child = self.requests.labels(route=route, method=key[1], status=str(status))
            self._answered[key] = child
        child.inc()

    def render(self) -> bytes:
        """The Prometheus text exposition of this registry."""
        return generate_latest(self.registry)
