"""Histories built to make the checker lie: a false SAFE hides a loss, a false UNSAFE blames a clean run.

A history the recorder cannot produce is refused with `CheckerError` rather
than judged: a malformed history must never come out SAFE.
"""

from __future__ import annotations

import math

import pytest

from fencegate.lab.checker import Verdict, check
from fencegate.lab.errors import CheckerError, HistoryError
from fencegate.lab.history import Event, History, Meta
from tests.lab.histories import acquire, op, release

META = Meta(scenario="hand", mode="lock-only", lock="single", seed=0)


def judge(*events: Event, final: int, initial: int = 0) -> Verdict:
    return check(History(META, events, final=final, initial=initial))


def two_readers() -> tuple[Event, ...]:
    """c1 and c2 each take a lease and read 0 (no seq, as the gateway answers reads)."""
    return (
        acquire(0.0, "c1", "c1/1"),
        op(0.1, "c1", "read", "c1/1", "ok", 0),
        acquire(0.2, "c2", "c2/1"),
        op(0.3, "c2", "read", "c2/1", "ok", 0),
    )


# -- false SAFE: a loss or an interleaving the checker must not miss ------------------------------------


def test_two_writes_acknowledged_with_one_seq_are_refused() -> None:
    """Both wrote 1 after reading 0: one increment is lost, whatever the shared seq suggests."""
    with pytest.raises(CheckerError, match="seq 3"):
        judge(
            *two_readers(),
            op(0.4, "c1", "write", "c1/1", "ok", 1, seq=3),
            op(0.5, "c2", "write", "c2/1", "ok", 1, seq=3),
            final=1,
        )


def test_a_write_the_store_recorded_but_the_client_never_heard_of_still_counts() -> None:
    """c2's answer was lost (error), yet the store took it: it counts as an increment, so c1's loss shows."""
    verdict = judge(
        *two_readers(),
        op(0.4, "c1", "write", "c1/1", "ok", 1, seq=1),
        op(0.5, "c2", "write", "c2/1", "ok", 1, seq=2),
        acquire(0.6, "c3", "c3/1"),
        op(0.7, "c3", "read", "c3/1", "ok", 1),
        op(0.8, "c3", "write", "c3/1", "sent", 2),
        Event(0.85, "store", "write", "c3/1", None, "ok", value=2, seq=3, detail="store log"),
        op(0.9, "c3", "write", "c3/1", "error", 2),
        final=2,
    )
    assert (verdict.acknowledged, verdict.lost_updates) == (3, 1)
    assert not verdict.safe


def test_a_counter_that_did_not_start_at_the_recorded_initial_value_is_refused() -> None:
    """The counter held 5, the header says 0: 6 - 0 would cover both increments and hide c1's loss."""
    events = (
        acquire(0.0, "c1", "c1/1"),
        op(0.1, "c1", "read", "c1/1", "ok", 5),
        acquire(0.2, "c2", "c2/1"),
        op(0.3, "c2", "read", "c2/1", "ok", 5),
        op(0.4, "c1", "write", "c1/1", "ok", 6, seq=1),
        op(0.5, "c2", "write", "c2/1", "ok", 6, seq=2),
    )
    with pytest.raises(CheckerError, match="initial"):
        judge(*events, final=6)
    assert judge(*events, final=6, initial=5).lost_updates == 1


def test_an_interleaving_of_leases_with_one_token_acquired_at_one_instant_counts() -> None:
    """Equal tokens, equal acquisition times: still two leases, and c1, c2, c1 at the store breaks one."""
    verdict = judge(
        acquire(0.0, "c1", "c1/1", token=5),
        acquire(0.0, "c2", "c2/1", token=5),
        op(0.1, "c1", "read", "c1/1", "ok", 0, seq=1, token=5),
        op(0.2, "c2", "read", "c2/1", "ok", 0, seq=2, token=5),
        op(0.3, "c2", "write", "c2/1", "ok", 1, seq=3, token=5),
        op(0.4, "c1", "read", "c1/1", "ok", 1, seq=4, token=5),
        final=1,
    )
    assert verdict.interleaved_leases == 1
    assert not verdict.safe


def test_store_requests_under_a_lease_never_acquired_are_refused() -> None:
    """c1's acquire is missing: its requests cannot be placed in lease order, so c1, c2, c1 would pass."""
    events = (
        op(0.1, "c1", "read", "c1/1", "ok", 0, seq=1),
        acquire(0.2, "c2", "c2/1"),
        op(0.3, "c2", "read", "c2/1", "ok", 0, seq=2),
        op(0.4, "c2", "write", "c2/1", "ok", 1, seq=3),
        op(0.5, "c1", "read", "c1/1", "ok", 1, seq=4),
    )
    with pytest.raises(CheckerError, match="c1/1"):
        judge(*events, final=1)


def test_a_store_request_without_a_lease_is_refused() -> None:
    with pytest.raises(CheckerError, match="no lease"):
        judge(Event(0.1, "c1", "write", None, None, "ok", value=1, seq=1), final=1)


def test_a_store_request_before_its_acquire_is_refused() -> None:
    with pytest.raises(CheckerError, match="before"):
        judge(op(0.1, "c1", "read", "c1/1", "ok", 0, seq=1), acquire(0.2, "c1", "c1/1"), final=0)


def test_a_release_before_its_acquire_is_refused() -> None:
    """A lease ending before it began would drop out of every overlap."""
    with pytest.raises(CheckerError, match="before"):
        judge(
            acquire(0.0, "c2", "c2/1", until=1.0),
            release(0.1, "c1", "c1/1"),
            acquire(0.2, "c1", "c1/1", until=1.2),
            final=0,
        )


def test_a_lease_acquired_twice_is_refused() -> None:
    """One lease name, two acquisitions (a renewal, or a reused name): which validity holds is unknowable."""
    with pytest.raises(CheckerError, match="acquired twice"):
        judge(
            acquire(0.0, "c1", "c1/1", until=1.0),
            acquire(0.9, "c1", "c1/1", until=1.9),
            op(1.5, "c1", "write", "c1/1", "ok", 1, seq=1),
            final=1,
        )


def test_events_out_of_time_order_are_refused() -> None:
    """Shuffled, the sent/answer pairs come apart: one zombie request would count twice."""
    with pytest.raises(CheckerError, match="time order"):
        judge(
            acquire(0.0, "c1", "c1/1", until=1.0),
            op(2.7, "c1", "write", "c1/1", "ok", 1, seq=1),
            op(2.6, "c1", "write", "c1/1", "sent", 1),
            final=1,
        )


def test_a_time_that_is_not_a_number_is_refused() -> None:
    """NaN compares false both ways (JSON allows it): an acquire at NaN would rank neither before nor after
    another lease, so the event itself refuses it and no history holds one."""
    with pytest.raises(HistoryError, match="not a number"):
        acquire(math.nan, "c2", "c2/1")


def test_an_acknowledged_write_without_seq_is_refused() -> None:
    """c1 read, c2 wrote, c1 wrote: without its place in the store's order, c1's write hides c1, c2, c1."""
    with pytest.raises(CheckerError, match="seq"):
        judge(
            acquire(0.0, "c1", "c1/1"),
            op(0.1, "c1", "read", "c1/1", "ok", 0, seq=1),
            acquire(0.2, "c2", "c2/1"),
            op(0.3, "c2", "write", "c2/1", "ok", 1, seq=2),
            op(0.4, "c1", "write", "c1/1", "ok", 2),
            final=2,
        )


def test_a_refused_request_with_a_seq_is_refused() -> None:
    """A seq says the store accepted it, the outcome says it did not: the history contradicts itself."""
    with pytest.raises(CheckerError, match="seq"):
        judge(
            *two_readers(),
            op(0.4, "c2", "write", "c2/1", "ok", 1, seq=1),
            op(0.5, "c1", "write", "c1/1", "refused", 1, seq=2),
            final=1,
        )


def test_a_later_lease_with_a_lower_token_that_writes_between_another_is_unsafe() -> None:
    """The token source went back (INCR restarted): c2 holds 1 after c1's 7, and the store saw c1, c2, c1."""
    verdict = judge(
        acquire(0.0, "c1", "c1/1", token=7, until=1.0),
        op(0.1, "c1", "read", "c1/1", "ok", 0, seq=1, token=7),
        acquire(1.1, "c2", "c2/1", token=1, until=2.1),
        op(1.2, "c2", "read", "c2/1", "ok", 0, seq=2, token=1),
        op(1.3, "c2", "write", "c2/1", "ok", 1, seq=3, token=1),
        op(1.4, "c1", "write", "c1/1", "ok", 1, seq=4, token=7),
        final=1,
    )
    assert (verdict.lost_updates, verdict.interleaved_leases) == (1, 1)
    assert verdict.zombie_requests == 1


def test_several_writes_of_one_lease_around_another_are_each_an_interleaving() -> None:
    """c1 writes, c2 writes, c1 writes twice more (a stale lease replaying): both late writes count."""
    verdict = judge(
        acquire(0.0, "c1", "c1/1", token=1),
        acquire(0.1, "c2", "c2/1", token=2),
        op(0.2, "c1", "write", "c1/1", "ok", 1, seq=1, token=1),
        op(0.3, "c2", "write", "c2/1", "ok", 2, seq=2, token=2),
        op(0.4, "c1", "write", "c1/1", "ok", 2, seq=3, token=1),
        op(0.5, "c1", "write", "c1/1", "ok", 3, seq=4, token=1),
        final=3,
    )
    assert verdict.interleaved == (3, 4)
    assert verdict.interleaved_leases == 1
    assert verdict.lost_updates == 1


def test_a_refused_stale_write_is_not_an_increment() -> None:
    verdict = judge(
        *two_readers(),
        op(0.4, "c2", "write", "c2/1", "ok", 1, seq=1),
        op(0.5, "c1", "write", "c1/1", "refused", 1),
        final=1,
    )
    assert (verdict.acknowledged, verdict.refused, verdict.lost_updates) == (1, 1, 0)
    assert verdict.safe


# -- false UNSAFE or a wrong explanation: legitimate histories the checker must not blame ----------------


def test_a_write_recorded_by_client_and_store_is_one_request_for_zombies() -> None:
    """The write left in time; the store logged it after the lease ran out. No zombie, one increment."""
    verdict = judge(
        acquire(0.0, "c1", "c1/1", until=1.0),
        op(0.5, "c1", "write", "c1/1", "sent", 1),
        Event(1.1, "store", "write", "c1/1", None, "ok", value=1, seq=1, detail="store log"),
        op(1.2, "c1", "write", "c1/1", "ok", 1, seq=1),
        final=1,
    )
    assert (verdict.acknowledged, verdict.zombie_requests, verdict.lost_updates) == (1, 0, 0)


def test_a_zombie_recorded_by_client_and_store_counts_once() -> None:
    verdict = judge(
        acquire(0.0, "c1", "c1/1", until=1.0),
        op(1.5, "c1", "write", "c1/1", "sent", 1),
        Event(1.6, "store", "write", "c1/1", None, "ok", value=1, seq=1, detail="store log"),
        op(1.7, "c1", "write", "c1/1", "ok", 1, seq=1),
        final=1,
    )
    assert verdict.zombie_requests == 1


def test_a_retried_write_answered_twice_with_one_seq_is_one_increment() -> None:
    """A retry the store answered from its idempotency record: same lease, value and seq."""
    verdict = judge(
        acquire(0.0, "c1", "c1/1"),
        op(0.1, "c1", "write", "c1/1", "sent", 1),
        op(0.2, "c1", "write", "c1/1", "ok", 1, seq=1),
        op(0.3, "c1", "write", "c1/1", "ok", 1, seq=1),
        final=1,
    )
    assert (verdict.acknowledged, verdict.lost_updates) == (1, 0)


def test_a_release_that_races_expiry_is_neither_overlap_nor_zombie() -> None:
    """c1's release left just before its validity ended; the node answered after c2 had the lock."""
    verdict = judge(
        acquire(0.0, "c1", "c1/1", until=1.0),
        op(0.1, "c1", "read", "c1/1", "ok", 0),
        op(0.2, "c1", "write", "c1/1", "ok", 1, seq=1),
        Event(0.99, "c1", "release", "c1/1", None, "sent"),
        acquire(1.0, "c2", "c2/1", until=2.0),
        Event(1.01, "c1", "release", "c1/1", None, "refused"),
        op(1.1, "c2", "read", "c2/1", "ok", 1),
        op(1.2, "c2", "write", "c2/1", "ok", 2, seq=2),
        final=2,
    )
    assert (verdict.overlaps, verdict.zombie_requests) == (0, 0)
    assert verdict.safe


def test_events_at_one_instant_are_neither_overlap_nor_zombie() -> None:
    """A request sent the instant its lease ends is in time; a lease taken the instant another ends is not
    an overlap."""
    verdict = judge(
        acquire(0.0, "c1", "c1/1", until=1.0),
        op(1.0, "c1", "write", "c1/1", "sent", 1),
        op(1.0, "c1", "write", "c1/1", "ok", 1, seq=1),
        acquire(1.0, "c2", "c2/1", until=2.0),
        op(1.0, "c2", "read", "c2/1", "ok", 1),
        op(1.0, "c2", "write", "c2/1", "ok", 2, seq=2),
        final=2,
    )
    assert (verdict.overlaps, verdict.zombie_requests, verdict.interleaved_leases) == (0, 0, 0)
    assert verdict.safe


def test_a_counter_seeded_above_zero_with_its_initial_recorded_is_clean() -> None:
    verdict = judge(
        acquire(0.0, "c1", "c1/1"),
        op(0.1, "c1", "read", "c1/1", "ok", 5),
        op(0.2, "c1", "write", "c1/1", "ok", 6, seq=1),
        final=6,
        initial=5,
    )
    assert (verdict.acknowledged, verdict.lost_updates) == (1, 0)
    assert verdict.safe
