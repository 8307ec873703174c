"""An assertion on a checker `Verdict` that the scenario tests of every lock design make."""

from __future__ import annotations

from fencegate.lab.checker import Verdict


def assert_the_fence_refused(verdict: Verdict) -> None:
    """Safe because the fence refused a stale write, not because the faults happened to miss."""
    assert (verdict.lost_updates, verdict.interleaved_leases) == (0, 0), verdict
    assert verdict.refused >= 1, verdict
