"""`PrometheusObserver`: a `Redlock`'s events as Prometheus metrics (`pip install 'fencegate[prometheus]'`).

Nothing imports this module, or `prometheus_client`, unless the program does:

    from lockclient.prometheus import PrometheusObserver

    metrics = PrometheusObserver()            # once per process (per registry)
    locker = Redlock(masters, tokens=..., observer=metrics)

No metric has a resource label: resource names are the callers' own and
unbounded. Masters are labelled by URL without credentials (their number is
the configuration's).
"""

from __future__ import annotations

from collections.abc import Sequence

from lockclient.errors import MissingExtra
from lockclient.observe import Observer, Retry

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
except ImportError as exc:  # pragma: no cover - the message is tested in a fresh interpreter
    raise MissingExtra(
        "lockclient.prometheus needs the 'prometheus_client' package, which is not installed: "
        "pip install 'fencegate[prometheus]'",
        extra="prometheus",
        package="prometheus_client",
    ) from exc

__all__ = ["PrometheusObserver"]

ATTEMPT_BUCKETS = (1, 2, 3, 5, 10, 20, 50, 100, float("inf"))


class PrometheusObserver(Observer):
    """Counts and times what `Redlock`s do, in `registry` (the default registry when not given).

    One instance per registry: share it between every `Redlock` of the
    process (a second one on the same registry is refused by
    prometheus_client as a duplicate). Names start with `namespace`:

    - `lockclient_acquire_seconds{outcome}`: histogram of acquire() latency, token draw included;
      outcome is `acquired`, `timeout` (attempts or time used up) or `unreachable` (no quorum answered)
    - `lockclient_acquire_attempts{outcome}`: histogram of attempts per acquire()
    - `lockclient_acquire_retries_total{reason}`: attempts that failed and were tried again;
      reason `held`, `split` or `unreachable`
    - `lockclient_master_failures_total{master}`: a master did not answer an attempt, renewal or release
    - `lockclient_renewals_total`, `lockclient_renewal_failures_total`: renewal rounds confirmed by a
      quorum, and rounds without one (retried while the lease is valid)
    - `lockclient_leases_lost_total`, `lockclient_leases_released_total`
    - `lockclient_lease_held_seconds`: histogram of how long released leases were held
    """

    def __init__(self, *, registry: CollectorRegistry | None = None, namespace: str = "lockclient") -> None:
        registry = REGISTRY if registry is None else registry

        def counter(name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
            return Counter(name, doc, labels, namespace=namespace, registry=registry)

        self._acquire_seconds = Histogram(
            "acquire_seconds", "acquire() latency, the token draw included", ["outcome"],
            namespace=namespace, registry=registry,
        )  # fmt: skip
        self._attempts = Histogram(
            "acquire_attempts", "attempts per acquire()", ["outcome"],
            namespace=namespace, registry=registry, buckets=ATTEMPT_BUCKETS,
        )  # fmt: skip
        self._retries = counter("acquire_retries", "failed attempts tried again, by reason", ["reason"])
        self._master_failures = counter("master_failures", "a master did not answer", ["master"])
        self._renewals = counter("renewals", "renewals confirmed by a quorum")
        self._renewal_failures = counter("renewal_failures", "renewal rounds without a quorum")
        self._lost = counter("leases_lost", "leases lost (validity over, or taken)")
        self._released = counter("leases_released", "leases released")
        self._held = Histogram(
            "lease_held_seconds", "how long released leases were held", namespace=namespace, registry=registry
        )

    def acquired(self, resource: str, token: int | None, *, seconds: float, attempts: int) -> None:
        self._acquire_seconds.labels("acquired").observe(seconds)
        self._attempts.labels("acquired").observe(attempts)

    def not_acquired(self, resource: str, *, seconds: float, attempts: int, unreachable: bool) -> None:
        outcome = "unreachable" if unreachable else "timeout"
        self._acquire_seconds.labels(outcome).observe(seconds)
        self._attempts.labels(outcome).observe(attempts)

    def retried(self, resource: str, *, reason: Retry) -> None:
        self._retries.labels(reason).inc()

    def masters_failed(self, resource: str, masters: Sequence[str]) -> None:
        for master in masters:
            self._master_failures.labels(master).inc()

    def renewed(self, resource: str, token: int | None) -> None:
        self._renewals.inc()

    def renewal_failed(self, resource: str, token: int | None) -> None:
        self._renewal_failures.inc()

    def lost(self, resource: str, token: int | None) -> None:
        self._lost.inc()

    def released(self, resource: str, token: int | None, *, held: float) -> None:
        self._released.inc()
        self._held.observe(held)
