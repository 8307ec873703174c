"""Every benchmark runs end to end for a tiny count and produces its numbers.

Speed is never asserted here: only that each case measured something and
each goal was computed. The numbers themselves belong to `fencegate bench`.
"""

from __future__ import annotations

import math

import pytest

from fencegate.bench import gateway
from fencegate.bench.cli import benchmarks, run_all
from fencegate.bench.contention import LOOP, PEERS, ROUNDS
from fencegate.bench.section import Section

pytestmark = pytest.mark.filterwarnings(
    # aioredlock's bundled aioredis 1.x predates Python 3.11's asyncio changes
    "ignore::DeprecationWarning",
)


async def test_every_benchmark_produces_its_numbers() -> None:
    names = list(benchmarks())
    sections = await run_all(names, quick=True, quiet=True, smoke=True)
    assert [s.name for s in sections] == names
    for section in sections:
        _check(section)
    _check_contention(next(s for s in sections if s.name == "contention"))
    (gateway_section,) = [s for s in sections if s.name == "gateway"]
    assert [r.name for r in gateway_section.results] == list(gateway.CASES)
    assert [g.name for g in gateway_section.goals] == [
        "SQLite: fenced group commit / naive durable server",
        "SQLite: fence on / fence off",
        "PostgreSQL: fenced group commit / naive durable server",
        "PostgreSQL / SQLite, both with group commit",
        "PostgreSQL: fence on / fence off",
        "PostgreSQL: 2 replicas / 1 replica",
    ]
    # the PostgreSQL goal's note gives this machine's bound from the same run's CPU readings
    assert "CPU per 1,000 requests" in gateway_section.goals[2].note
    # the `reads` lines: plain GETs after the PUTs on the same gateway, each engine with group commit
    reads = {name: value for name, value in gateway_section.extra.items() if name.startswith("reads: ")}
    assert len(reads) == len(gateway.READ_CASES), reads
    assert all(value > 0 and math.isfinite(value) for value in reads.values()), reads


def _check(section: Section) -> None:
    assert section.results
    for result in section.results:
        assert result.rates, f"{result.name} measured no run"
        assert all(rate > 0 and math.isfinite(rate) for rate in result.rates)
    for goal in section.goals:
        assert math.isfinite(goal.value), goal


def _check_contention(section: Section) -> None:
    """Both workloads measured every peer; the goals are the rounds workload's.

    A round always has hand-offs (8 holders); a tight loop this short may not, so only rounds are asked.
    """
    for group in (ROUNDS, LOOP):
        measured = {r.name: r for r in section.results if r.group == group}
        assert sorted(measured) == sorted(PEERS), group
    for result in section.results:
        if result.group == ROUNDS:
            assert result.latencies, f"{ROUNDS}: {result.name} timed no hand-off"
    assert section.goals
    assert all(goal.name.startswith(f"{ROUNDS}: ") for goal in section.goals)
