"""Every benchmark runs end to end for a tiny count and produces its numbers.

Speed is never asserted here: only that each case measured something and
each goal was computed. The numbers themselves belong to `fencegate bench`.
"""

from __future__ import annotations

import math

import pytest

from bench.cli import benchmarks, run_all

pytestmark = pytest.mark.filterwarnings(
    # aioredlock's bundled aioredis 1.x predates Python 3.11's asyncio changes
    "ignore::DeprecationWarning",
)


@pytest.mark.parametrize("name", list(benchmarks()))
async def test_benchmark_produces_its_numbers(name: str) -> None:
    [section] = await run_all([name], quick=True, quiet=True)
    assert section.name == name
    assert section.results
    for result in section.results:
        assert result.rates, f"{result.name} measured no run"
        assert all(rate > 0 and math.isfinite(rate) for rate in result.rates)
    for goal in section.goals:
        assert math.isfinite(goal.value), goal
