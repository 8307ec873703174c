"""The contention harness's bookkeeping: rounds, hand-offs and rates (fake clients, no servers).

The servers' part is covered by the smoke test; these check that a round
really gives every client the lock once, that a zero budget still runs one
round, and that hand-offs are never counted across rounds.
"""

from __future__ import annotations

import threading
import time

from fencegate.bench.contention import (
    CLIENTS,
    ROUNDS,
    Round,
    Span,
    _async_rounds,
    _pottery_rounds,
    _rounds_result,
)


class _AsyncHolder:
    """A contender with no lock behind it: the bookkeeping is what is under test."""

    async def cycle(self) -> Span:
        granted = time.monotonic()
        return granted, time.monotonic()

    async def aclose(self) -> None:
        return None


class _SyncHolder:
    """A thread's contender: a plain lock shared by all, held for an instant."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock

    def cycle(self) -> Span:
        with self.lock:
            granted = time.monotonic()
            return granted, time.monotonic()


def _each_client_once(rounds: list[Round]) -> None:
    for one in rounds:
        assert sorted(number for _, _, number in one.spans) == list(range(CLIENTS))
        assert one.start <= min(s[0] for s in one.spans)
        assert max(s[1] for s in one.spans) <= one.end


async def test_async_rounds_give_every_client_the_lock_once_per_round() -> None:
    rounds = await _async_rounds([_AsyncHolder() for _ in range(CLIENTS)], 0.0)
    assert len(rounds) == 1  # a zero budget still runs one round
    _each_client_once(rounds)
    rounds = await _async_rounds([_AsyncHolder() for _ in range(CLIENTS)], 0.02)
    assert len(rounds) >= 1
    _each_client_once(rounds)


def test_thread_rounds_give_every_client_the_lock_once_per_round() -> None:
    lock = threading.Lock()
    rounds = _pottery_rounds([_SyncHolder(lock) for _ in range(CLIENTS)], 0.0)
    assert len(rounds) == 1
    _each_client_once(rounds)
    rounds = _pottery_rounds([_SyncHolder(lock) for _ in range(CLIENTS)], 0.02)
    assert len(rounds) >= 1
    _each_client_once(rounds)


def test_rounds_rate_and_handoffs_stay_within_rounds() -> None:
    first, second = Round(0.0), Round(10.0)
    first.spans = [(1.0, 1.5, 0), (2.0, 2.5, 1)]  # one hand-off: 0.5 s
    first.close(3.0)
    second.spans = [(11.0, 11.25, 1), (12.0, 12.5, 0)]  # one hand-off: 0.75 s; the gap 2.5 -> 11.0 is not one
    second.close(13.0)
    result = _rounds_result("x", [[first, second]])
    assert result.group == ROUNDS
    assert result.rates == [CLIENTS * 2 / 13.0]
    assert sorted(result.latencies) == [0.5, 0.75]
