"""The batcher's rules, on a scripted source: who shares a request, in which order, and what a failure does.

Pure logic, so a scripted `send` stands in for the server here; the same
rules are tested on every real source in test_tokens.py (concurrent tasks in
several processes, one and several resources).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from lockclient import TokenSourceError
from lockclient.tokens._batch import Batcher


class Scripted:
    """A counter behind a gate: each request waits until the test opens it, then takes its numbers."""

    def __init__(self) -> None:
        self.requests: list[list[str]] = []
        self.gates: list[asyncio.Event] = []
        self.fail: list[BaseException | None] = []
        self.counter = 0

    async def send(self, resources: Sequence[str]) -> list[int]:
        gate = asyncio.Event()
        self.requests.append(list(resources))
        self.gates.append(gate)
        self.fail.append(None)
        await gate.wait()
        error = self.fail[self.gates.index(gate)]
        if error is not None:
            raise error
        first = self.counter + 1
        self.counter += len(resources)
        return list(range(first, self.counter + 1))

    def open(self, index: int, error: BaseException | None = None) -> None:
        self.fail[index] = error
        self.gates[index].set()


async def settle() -> None:
    """Let every ready task run until each waits again (a few loop turns, no timing)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_draw_alone_is_sent_at_once_and_gets_its_own_request() -> None:
    source = Scripted()
    batcher = Batcher(source.send, max_batch=8)
    draw = asyncio.create_task(batcher.draw("a"))
    await settle()
    assert source.requests == [["a"]]
    source.open(0)
    assert await draw == 1


async def test_draws_that_wait_share_the_next_request_in_arrival_order() -> None:
    source = Scripted()
    batcher = Batcher(source.send, max_batch=8)
    first = asyncio.create_task(batcher.draw("a"))
    await settle()
    waiting = [asyncio.create_task(batcher.draw(name)) for name in ("b", "a", "c")]
    await settle()
    assert source.requests == [["a"]], "a draw joined a request that was already sent"
    source.open(0)
    await settle()
    assert source.requests == [["a"], ["b", "a", "c"]]
    source.open(1)
    assert await first == 1
    assert [await d for d in waiting] == [2, 3, 4]


async def test_every_draw_gets_a_token_above_every_token_issued_before_it_began() -> None:
    source = Scripted()
    batcher = Batcher(source.send, max_batch=3)
    issued: list[int] = []
    draws: list[tuple[int, asyncio.Task[int]]] = []
    for round_ in range(6):
        draws += [(max(issued, default=0), asyncio.create_task(batcher.draw("r"))) for _ in range(round_ + 1)]
        await settle()
        for index, gate in enumerate(source.gates):
            if not gate.is_set():
                source.open(index)
        await settle()
        issued += [d.result() for _, d in draws if d.done()]
    while not all(d.done() for _, d in draws):
        for index, gate in enumerate(source.gates):
            if not gate.is_set():
                source.open(index)
        await settle()
    tokens = [d.result() for _, d in draws]
    assert len(set(tokens)) == len(tokens)
    assert all(token > highest for highest, token in ((h, d.result()) for h, d in draws))
    assert all(len(r) <= 3 for r in source.requests)


async def test_distinct_keeps_two_draws_for_one_resource_out_of_one_request() -> None:
    source = Scripted()
    batcher = Batcher(source.send, max_batch=8, distinct=True)
    first = asyncio.create_task(batcher.draw("x"))
    await settle()
    rest = [asyncio.create_task(batcher.draw(name)) for name in ("a", "a", "b", "a")]
    await settle()
    for index in range(4):
        source.open(index)
        await settle()
    assert source.requests == [["x"], ["a", "b"], ["a"], ["a"]]
    assert await first == 1
    a1, a2, _, a3 = [await d for d in rest]
    assert a1 < a2 < a3


async def test_a_failed_request_fails_each_of_its_draws_and_the_next_request_goes_on() -> None:
    source = Scripted()
    batcher = Batcher(source.send, max_batch=8)
    first = asyncio.create_task(batcher.draw("a"))
    await settle()
    second = [asyncio.create_task(batcher.draw("a")) for _ in range(2)]
    await settle()
    source.open(0, TokenSourceError("down", source="scripted"))
    await settle()
    with pytest.raises(TokenSourceError, match="down"):
        await first
    source.open(1)
    assert [await d for d in second] == [1, 2]


async def test_a_cancelled_draw_leaves_its_neighbours_their_tokens() -> None:
    source = Scripted()
    batcher = Batcher(source.send, max_batch=8)
    first = asyncio.create_task(batcher.draw("a"))
    await settle()
    quitter = asyncio.create_task(batcher.draw("a"))
    stayer = asyncio.create_task(batcher.draw("a"))
    await settle()
    quitter.cancel()
    source.open(0)
    await settle()
    assert source.requests == [["a"], ["a"]], "a cancelled draw still took a place in a request"
    source.open(1)
    assert await first == 1
    assert await stayer == 2
    assert quitter.cancelled()


async def test_in_flight_bounds_the_requests_out_at_once() -> None:
    source = Scripted()
    batcher = Batcher(source.send, max_batch=1, in_flight=2)
    draws = [asyncio.create_task(batcher.draw("a")) for _ in range(5)]
    await settle()
    assert len(source.requests) == 2
    source.open(1)
    await settle()
    assert len(source.requests) == 3
    for index in (0, 2, 3, 4):
        await settle()
        source.open(index)
    await asyncio.gather(*draws)
    assert sorted(d.result() for d in draws) == [1, 2, 3, 4, 5]
    await batcher.aclose()


def test_sizes_below_one_are_refused() -> None:
    async def send(resources: Sequence[str]) -> list[int]:
        return []

    with pytest.raises(ValueError, match=">= 1"):
        Batcher(send, max_batch=0)
