"""The checker's definitions on hand-written histories whose answers are known."""

from __future__ import annotations

import pytest

from fencegate.lab.checker import check
from fencegate.lab.errors import CheckerError
from fencegate.lab.history import Event, History, Meta
from tests.lab import histories
from tests.lab.histories import acquire, op, release

META = Meta(scenario="hand", mode="lock-only", lock="single", seed=0)


def clean_run() -> History:
    return histories.clean_run(META)


def paused_holder(fenced: bool) -> History:
    return histories.paused_holder(META, fenced=fenced)


def both_read_first(*then: Event) -> History:
    """c1 and c2 each take a lease and read 0 (seq 1 and 2), then `then`; the store ends at 1."""
    events = (
        acquire(0.0, "c1", "c1/1"),
        op(0.1, "c1", "read", "c1/1", "ok", 0, seq=1),
        acquire(0.2, "c2", "c2/1"),
        op(0.3, "c2", "read", "c2/1", "ok", 0, seq=2),
        *then,
    )
    return History(META, events, final=1)


def test_a_clean_run_has_no_finding() -> None:
    verdict = check(clean_run())
    assert (verdict.ops, verdict.acknowledged, verdict.final) == (2, 2, 2)
    assert (verdict.lost_updates, verdict.interleaved_leases, verdict.refused) == (0, 0, 0)
    assert (verdict.zombie_requests, verdict.overlaps) == (0, 0)
    assert verdict.safe


def test_the_paused_holder_without_fence_loses_an_update_and_interleaves() -> None:
    verdict = check(paused_holder(fenced=False))
    assert verdict.acknowledged == 2
    assert verdict.lost_updates == 1
    assert verdict.interleaved_leases == 1
    assert verdict.interleaved == (5,)  # c1's write, accepted after c2 (token 34) had written
    assert verdict.zombie_requests == 1  # the write left c1 at 2.6, its lease ended at 1.0
    assert verdict.overlaps == 0  # by their own clocks the leases never overlapped
    assert not verdict.safe


def test_the_paused_holder_with_fence_is_refused_and_nothing_is_lost() -> None:
    verdict = check(paused_holder(fenced=True))
    assert (verdict.acknowledged, verdict.lost_updates, verdict.interleaved_leases) == (1, 0, 0)
    assert verdict.refused == 1
    assert verdict.zombie_requests == 1  # a zombie counts whether or not it was accepted
    assert verdict.safe


def test_a_b_a_counts_the_earlier_lease_even_without_a_lost_update() -> None:
    """c1 reads, c2 reads and writes, c1 reads again: non-contiguous, though no write was lost."""
    verdict = check(
        both_read_first(
            op(0.4, "c2", "write", "c2/1", "ok", 1, seq=3),
            op(0.5, "c1", "read", "c1/1", "ok", 1, seq=4),
        )
    )
    assert (verdict.lost_updates, verdict.interleaved_leases, verdict.interleaved) == (0, 1, (4,))


def test_acceptance_order_is_the_stores_not_the_clients_clock() -> None:
    """c1's write reached the store (seq 3) after c2's, though c1 recorded its answer first."""
    verdict = check(
        both_read_first(
            op(0.4, "c1", "write", "c1/1", "ok", 1, seq=4),
            op(0.5, "c2", "write", "c2/1", "ok", 1, seq=3),
        )
    )
    assert verdict.lost_updates == 1
    assert verdict.interleaved == (4,)


def test_a_regressed_token_tie_is_broken_by_acquisition_order() -> None:
    """Two leases with token 5 (the INCR source restarted): the later acquisition is the later lease."""
    events = [
        acquire(0.0, "c1", "c1/1", token=5),
        op(0.1, "c1", "read", "c1/1", "ok", 0, seq=1, token=5),
        acquire(1.0, "c2", "c2/1", token=5),
        op(1.1, "c2", "read", "c2/1", "ok", 0, seq=2, token=5),
        op(1.2, "c2", "write", "c2/1", "ok", 1, seq=3, token=5),
        op(1.3, "c1", "write", "c1/1", "ok", 1, seq=4, token=5),
    ]
    verdict = check(History(META, tuple(events), final=1))
    assert (verdict.lost_updates, verdict.interleaved) == (1, (4,))


def test_overlapping_holders_are_counted_in_pairs() -> None:
    events = [
        acquire(0.0, "c1", "c1/1", until=1.0),
        acquire(0.5, "c2", "c2/1", until=1.5),  # e.g. the node that held c1's key restarted empty
        acquire(0.9, "c3", "c3/1", until=1.9),
        release(1.6, "c2", "c2/1"),
    ]
    verdict = check(History(META, tuple(events), final=0))
    assert verdict.overlaps == 3
    assert set(verdict.overlapping) == {("c1/1", "c2/1"), ("c1/1", "c3/1"), ("c2/1", "c3/1")}


def test_an_early_release_ends_a_lease_for_overlaps() -> None:
    events = [
        acquire(0.0, "c1", "c1/1", until=1.0),
        release(0.2, "c1", "c1/1"),
        acquire(0.5, "c2", "c2/1", until=1.5),
    ]
    assert check(History(META, tuple(events), final=0)).overlaps == 0


def test_a_refused_release_still_ends_the_lease() -> None:
    """c1's key vanished (restart) and c2 holds it; c1's release is refused, and c1 stops there."""
    events = [
        acquire(0.0, "c1", "c1/1", until=1.0),
        acquire(0.2, "c2", "c2/1", until=1.2),
        Event(0.3, "c1", "release", "c1/1", None, "refused"),
        release(0.4, "c2", "c2/1"),
        acquire(0.5, "c2", "c2/2", until=1.5),
    ]
    verdict = check(History(META, tuple(events), final=0))
    assert verdict.overlapping == (("c1/1", "c2/1"),)


def test_a_lease_ends_when_its_release_left_not_when_the_answer_came() -> None:
    """c1's DEL reached redis and c2 acquired before c1 got around to recording the answer."""
    events = [
        acquire(0.0, "c1", "c1/1", until=1.0),
        Event(0.30, "c1", "release", "c1/1", None, "sent"),
        acquire(0.31, "c2", "c2/1", until=1.31),
        release(0.32, "c1", "c1/1"),
    ]
    assert check(History(META, tuple(events), final=0)).overlaps == 0


def test_token_epochs_without_validity_never_overlap() -> None:
    """fence-only mode draws tokens and holds no lock: there is no validity to overlap."""
    events = [acquire(0.0, "c1", "t/1", token=1), acquire(0.1, "c2", "t/2", token=2)]
    verdict = check(History(META, tuple(events), final=0))
    assert (verdict.overlaps, verdict.zombie_requests) == (0, 0)


def test_an_expire_event_ends_the_lease_before_its_until() -> None:
    events = [
        acquire(0.0, "c1", "c1/1", until=10.0),
        Event(0.5, "lab", "expire", "c1/1", None, "ok", detail="redis-0 restarted empty"),
        op(0.6, "c1", "write", "c1/1", "ok", 1, seq=1),
    ]
    assert check(History(META, tuple(events), final=1)).zombie_requests == 1


def test_a_write_recorded_by_client_and_store_counts_once() -> None:
    events = [
        acquire(0.0, "c1", "c1/1"),
        op(0.1, "c1", "write", "c1/1", "ok", 1, seq=1),
        Event(0.1, "store", "write", "c1/1", None, "ok", value=1, seq=1, detail="store log"),
    ]
    verdict = check(History(META, tuple(events), final=1))
    assert (verdict.acknowledged, verdict.lost_updates, verdict.interleaved_leases) == (1, 0, 0)


def test_a_history_without_final_value_is_refused() -> None:
    with pytest.raises(CheckerError, match="with_final"):
        check(History(META, clean_run().events))
