"""Alternating runs, medians and same-run ratios.

Absolute numbers drift from run to run on a shared 2-core machine, so every
claim a benchmark makes is a ratio between cases measured in the same
process, alternately: case A run 1, case B run 1, case A run 2, ... A case is
an async factory returning a `UnitOfWork`: one call is one unit of work (an
acquire+release, a token, a request), timed on the monotonic clock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fencegate.tables import grid


class UnitOfWork(Protocol):
    """One unit of work and the way out of whatever it opened."""

    async def __call__(self) -> None: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Case:
    """A named way to build a `UnitOfWork`; `group` names the table it belongs to."""

    group: str
    name: str
    setup: Callable[[], Awaitable[UnitOfWork]]


@dataclass
class Result:
    """Throughput per run and every latency of every run, in seconds."""

    group: str
    name: str
    rates: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    def percentile_ms(self, q: float) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        index = min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))
        return ordered[index] * 1000

    def as_dict(self) -> dict[str, object]:
        return {
            "group": self.group,
            "name": self.name,
            "runs": [round(r, 1) for r in self.rates],
            "median_per_s": round(self.median_rate, 1),
            "p50_ms": round(self.percentile_ms(50), 3),
            "p99_ms": round(self.percentile_ms(99), 3),
        }


Progress = Callable[[str], None]


async def run_alternating(
    cases: Sequence[Case], *, runs: int, ops: int, warmup: int = 20, progress: Progress | None = None
) -> list[Result]:
    """Run every case `runs` times, interleaved, `ops` timed calls per run."""
    results = [Result(case.group, case.name) for case in cases]
    built = [await case.setup() for case in cases]
    try:
        for op in built:
            for _ in range(warmup):
                await op()
        for run in range(runs):
            for case, op, result in zip(cases, built, results, strict=True):
                if progress is not None:
                    progress(f"{case.group}: {case.name} run {run + 1}/{runs}")
                clock = time.perf_counter
                start = clock()
                for _ in range(ops):
                    t0 = clock()
                    await op()
                    result.latencies.append(clock() - t0)
                result.rates.append(ops / (clock() - start))
    finally:
        for op in built:
            await op.aclose()
    return results


def ratio(results: Sequence[Result], numerator: str, denominator: str) -> float:
    """median(numerator) / median(denominator), both by case name."""
    by_name = {r.name: r for r in results}
    bottom = by_name[denominator].median_rate
    return by_name[numerator].median_rate / bottom if bottom else float("inf")


def paired_ratio(numerator: Result, denominator: Result) -> float:
    """The median over runs of numerator / denominator, each pair from the same run.

    For cases whose runs swing together (the disk's fsync latency drifts from
    one run to the next), pairing cancels the drift that a ratio of medians keeps.
    """
    pairs = [a / b for a, b in zip(numerator.rates, denominator.rates, strict=True) if b]
    return statistics.median(pairs) if pairs else float("inf")


def table(results: Sequence[Result]) -> str:
    """A plain-text table: one row per case, grouped as given."""
    rows = [
        (r.group, r.name, f"{r.median_rate:.0f}", f"{r.percentile_ms(50):.3f}", f"{r.percentile_ms(99):.3f}")
        for r in results
    ]
    return grid(("group", "case", "median/s", "p50 ms", "p99 ms"), rows, right=(2, 3, 4))
