"""Replica claims on SQLite and PostgreSQL: one conditional statement, so one winner, however many race.

Each claimant has an engine (a connection pool) of its own, as separate
gateway processes do; the claims start together. A control that decides
by reading first (the claim ran out, then take it over) loses that race on
PostgreSQL: every claimant wins it, where the real claim has one winner.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from fencegate.lab.cluster import LocalCluster
from storage import migrate, open_engine
from storage.models import ReplicaClaim
from storage.replicas import Holder, beat, claim, release
from tests.databases import fresh_database
from tests.waiting import eventually

CLAIMANTS = 8
SLOT = "upstream-trust-path"


@pytest.fixture(params=["sqlite", "postgresql"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
    async with fresh_database(cluster) as dsn:
        yield dsn


@pytest.fixture
async def engines(url: str) -> AsyncIterator[list[AsyncEngine]]:
    engines = [open_engine(url) for _ in range(CLAIMANTS)]
    await migrate(engines[0])
    try:
        yield engines
    finally:
        for engine in engines:
            await engine.dispose()


async def _together(engines: list[AsyncEngine], window: float) -> list[Holder | None]:
    for engine in engines:  # each pool opens its connection before the race, not during it
        async with engine.connect():
            pass
    start = asyncio.Event()

    async def one(i: int, engine: AsyncEngine) -> Holder | None:
        await start.wait()
        return await claim(engine, slot=SLOT, instance=f"i{i}", holder=f"claimant {i}", window=window)

    tasks = [asyncio.create_task(one(i, engine)) for i, engine in enumerate(engines)]
    await asyncio.sleep(0)
    start.set()
    return await asyncio.gather(*tasks)


async def test_of_claimants_racing_exactly_one_wins_and_the_others_name_it(
    engines: list[AsyncEngine],
) -> None:
    outcomes = await _together(engines, window=30.0)
    winners = [i for i, outcome in enumerate(outcomes) if outcome is None]
    assert len(winners) == 1, outcomes
    named = {outcome.instance for outcome in outcomes if outcome is not None}
    assert named == {f"i{winners[0]}"}
    for outcome in outcomes:
        if outcome is not None:
            assert 0 <= outcome.beat_ago < 30.0
            assert 0 < outcome.expires_in <= 30.0


async def test_only_the_holder_beats_and_releases(engines: list[AsyncEngine]) -> None:
    a, b = engines[:2]
    assert await claim(a, slot=SLOT, instance="a", holder="A", window=30.0) is None
    assert await beat(a, slot=SLOT, instance="a", window=30.0)
    assert not await beat(b, slot=SLOT, instance="b", window=30.0)
    await release(b, slot=SLOT, instance="b")  # not b's: nothing happens
    refused = await claim(b, slot=SLOT, instance="b", holder="B", window=30.0)
    assert refused is not None
    assert (refused.instance, refused.holder) == ("a", "A")
    await release(a, slot=SLOT, instance="a")
    assert await claim(b, slot=SLOT, instance="b", holder="B", window=30.0) is None


async def test_a_claim_that_ran_out_is_taken_over_and_its_holder_cannot_renew_it(
    engines: list[AsyncEngine],
) -> None:
    a, b = engines[:2]
    assert await claim(a, slot=SLOT, instance="a", holder="A", window=0.5) is None  # then a "crashes"
    assert await claim(b, slot=SLOT, instance="b", holder="B", window=30.0) is not None  # still fresh

    async def taken() -> bool:
        return await claim(b, slot=SLOT, instance="b", holder="B", window=30.0) is None

    await eventually(taken, within=10.0, what="the run-out claim taken over")
    assert not await beat(a, slot=SLOT, instance="a", window=30.0)  # the old holder learns it lost
    async with a.connect() as conn:
        rows = (await conn.execute(select(ReplicaClaim.instance, ReplicaClaim.holder))).all()
    assert [tuple(row) for row in rows] == [("b", "B")]


async def _stale_row(engine: AsyncEngine) -> None:
    """The row a crashed holder left: its claim ran out long ago."""
    assert await claim(engine, slot=SLOT, instance="crashed", holder="gone", window=-3600.0) is None


async def test_of_claimants_racing_for_a_run_out_claim_exactly_one_takes_it(
    engines: list[AsyncEngine],
) -> None:
    await _stale_row(engines[0])
    outcomes = await _together(engines, window=30.0)
    assert sum(outcome is None for outcome in outcomes) == 1, outcomes


async def _read_then_update(engine: AsyncEngine, instance: str, gap: asyncio.Barrier) -> bool:
    """The control: read whether the claim ran out, then take it. Not what `claim` does."""
    async with engine.begin() as conn:
        expires = (
            await conn.execute(select(ReplicaClaim.expires_at).where(ReplicaClaim.slot == SLOT))
        ).scalar()
        await gap.wait()  # every claimant has read before any writes: the gap a read-then-write leaves
        if expires is None or expires >= time.time():
            return False
        await conn.execute(update(ReplicaClaim).where(ReplicaClaim.slot == SLOT).values(instance=instance))
    return True


async def test_the_control_that_reads_then_takes_over_lets_several_win(
    engines: list[AsyncEngine], url: str
) -> None:
    if url.startswith("sqlite"):
        pytest.skip("SQLite's BEGIN IMMEDIATE serializes whole transactions, the control's too")
    await _stale_row(engines[0])
    gap = asyncio.Barrier(CLAIMANTS)
    outcomes = await asyncio.gather(*(_read_then_update(e, f"c{i}", gap) for i, e in enumerate(engines)))
    assert sum(outcomes) == CLAIMANTS  # every one "won": the race the one-statement claim has not
