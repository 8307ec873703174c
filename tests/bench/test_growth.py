"""`fencegate bench --only growth` runs end to end on a small filled store and computes its goals.

Speed is never asserted: only that each case measured something, the fill
happened on both engines, and each goal has a value.
"""

from __future__ import annotations

import math

from fencegate.bench import growth
from fencegate.bench.cli import run_all


async def test_the_growth_bench_produces_its_numbers() -> None:
    (section,) = await run_all(["growth"], quick=True, quiet=True, smoke=True)
    assert [r.name for r in section.results] == [f"{e}: {k}" for e in growth.ENGINES for k in growth.KINDS]
    assert all(r.rates and r.rates[0] > 0 for r in section.results)
    assert len(section.goals) == 4 * len(growth.ENGINES)
    assert all(math.isfinite(goal.value) for goal in section.goals)
    for engine in growth.ENGINES:
        assert f"{engine}: bytes per row, fencegate_bindings (100000 keys)" in section.extra
