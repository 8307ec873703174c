"""pan's report and spin's trail replay, parsed from fixed text (no spin needed)."""

from __future__ import annotations

import pytest

from fencegate.model.errors import SearchError, TrailError
from fencegate.model.pan import parse_pan
from fencegate.model.trail import EVENT_KEYS, parse_replay

SUMMARY = """\
pan:1: assertion violated ((bad&1)==0) (at depth 77)
pan: wrote fencegate.pml.trail

State-vector 76 byte, depth reached 131, errors: 1
     5224 states, stored
     5358 states, matched
    10582 transitions (= stored+matched)
  128.925	total actual memory usage

pan: elapsed time 0.01 seconds
"""


def test_pan_summary_gives_states_depth_memory_time_and_the_first_error() -> None:
    report = parse_pan(SUMMARY)
    assert (report.states, report.transitions, report.depth, report.errors) == (5224, 10582, 131, 1)
    assert report.memory_mb == pytest.approx(128.925)
    assert report.seconds == pytest.approx(0.01)
    assert report.first_error == "assertion violated ((bad&1)==0)"
    assert report.complete


@pytest.mark.parametrize(
    ("line", "reason"),
    [("error: max search depth too small", "depth"), ("pan: reached -DMEMLIM bound", "memory")],
)
def test_pan_summary_after_a_bound_is_incomplete(line: str, reason: str) -> None:
    report = parse_pan(line + "\n" + SUMMARY.replace("errors: 1", "errors: 0").split("\n", 2)[2])
    assert not report.complete
    assert report.limit is not None
    assert report.limit.startswith(reason)


def test_pan_counts_above_1e8_in_exponent_form_are_read() -> None:
    big = SUMMARY.replace("     5224 states, stored", "1.2087011e+08 states, stored").replace(
        "    10582 transitions", "2.4757557e+08 transitions"
    )
    report = parse_pan("pan: reached -DMEMLIM bound\n" + big)
    assert (report.states, report.transitions) == (120_870_110, 247_575_570)
    assert not report.complete


def test_pan_output_without_a_summary_is_an_error_not_a_proof() -> None:
    with pytest.raises(SearchError, match="no search summary"):
        parse_pan("Segmentation fault\n")


REPLAY = """\
              EV token 0 1 2 ok -1 0 after -1
  5:	proc  2 (Client:1) fencegate.pml:200 (state 9)	[printf(...)]
      EV fault -1 0 0 ok -1 0 restart 1
  7:	proc  0 (Adversary:1) fencegate.pml:300 (state 3)	[printf(...)]
              EV acquire 0 1 0 ok -1 0 quorum 2
  9:	proc  2 (Client:1) fencegate.pml:190 (state 31)	[printf(...)]
              EV token 0 1 2 ok -1 0 after -1
 10:	proc  2 (Client:1) fencegate.pml:230 (state 64)	[printf(...)]
      EV pause 0 0 0 ok -1 0 ttl -1
      EV expire 0 1 0 ok -1 0 ttl -1
 12:	proc  0 (Adversary:1) fencegate.pml:310 (state 22)	[printf(...)]
              EV write 0 1 2 sent 1 0 - -1
 13:	proc  2 (Client:1) fencegate.pml:250 (state 104)	[printf(...)]
              EV write 0 1 2 refused 1 0 stale 3
 15:	proc  2 (Client:1) fencegate.pml:255 (state 110)	[printf(...)]
spin: text of failed assertion: assert(((bad&2)==0))
spin: trail ends after 15 steps
#processes: 3
		counter = 4
		acked = 5
"""


def test_replay_becomes_lab_events_with_tokens_resumes_and_faults() -> None:
    trail = parse_replay(REPLAY)
    assert all(tuple(e) == EVENT_KEYS for e in trail.events)
    kinds = [(e["at"], e["client"], e["kind"], e["outcome"]) for e in trail.events]
    assert kinds == [
        (7.0, "lab", "fault", "ok"),
        (9.0, "c1", "acquire", "ok"),
        (12.0, "c1", "pause", "ok"),
        (12.0, "c1", "expire", "ok"),
        (13.0, "c1", "resume", "ok"),
        (13.0, "c1", "write", "sent"),
        (15.0, "c1", "write", "refused"),
    ]
    acquire = trail.events[1]
    assert acquire["lease"] == "c1/1"
    assert acquire["token"] == 2  # drawn after the quorum, written back onto the lease
    assert "after the quorum, at step 10" in acquire["detail"]
    assert acquire["until"] == 12.0  # its validity ended when the TTL passed
    assert trail.events[0]["detail"] == "redis-1 restarted without its keys"
    assert trail.events[-1]["detail"] == "stale token: the mark is 3"
    assert trail.events[-1]["seq"] is None
    assert (trail.final, trail.acknowledged, trail.steps) == (4, 5, 15)
    assert trail.assertion == "assert(((bad&2)==0))"


NAMED_REPLAY = """\
              EV read 0 1 2 sent -1 0 - 2
  5:\tproc  2 (Client:0) fencegate.pml:365 (state 79)\t[printf(...)]
              EV bind 0 1 2 ok -1 0 - 2
              EV read 0 1 2 ok 0 1 - 2
  8:\tproc  2 (Client:0) fencegate.pml:382 (state 117)\t[printf(...)]
              EV delete 0 1 2 sent -1 0 - 1
  9:\tproc  2 (Client:0) fencegate.pml:400 (state 130)\t[printf(...)]
              EV write 1 1 1 sent 1 0 - 1
 10:\tproc  3 (Client:1) fencegate.pml:429 (state 206)\t[printf(...)]
              EV delete 0 1 2 refused -1 0 wrong-resource 2
 11:\tproc  2 (Client:0) fencegate.pml:410 (state 140)\t[printf(...)]
              EV write 1 1 1 refused 1 0 stale 3
 12:\tproc  3 (Client:1) fencegate.pml:444 (state 252)\t[printf(...)]
              EV delete 0 2 3 ok -1 2 unbind 2
 14:\tproc  2 (Client:0) fencegate.pml:405 (state 135)\t[printf(...)]
spin: trail ends after 14 steps
"""


def test_replay_names_each_requests_resource_its_binding_and_why_it_was_refused() -> None:
    trail = parse_replay(NAMED_REPLAY)
    assert [(e["client"], e["kind"], e["outcome"], e["detail"]) for e in trail.events] == [
        ("c1", "read", "sent", "names resource key"),
        ("c1", "read", "ok", "resource key; binds the key to resource key"),
        ("c1", "delete", "sent", "names resource lock"),
        ("c2", "write", "sent", "names resource lock"),
        ("c1", "delete", "refused", "the key belongs to resource key, not lock"),
        ("c2", "write", "refused", "stale token: resource lock's mark is 3"),
        ("c1", "delete", "ok", "the key is free again (no tombstone)"),
    ]
    assert [e["seq"] for e in trail.accepted()] == [1, 2]
    assert trail.events[-1]["value"] is None


def test_replay_with_an_unknown_resource_names_both_files() -> None:
    with pytest.raises(TrailError, match=r"fencegate\.pml and model/trail\.py disagree"):
        parse_replay("  EV read 0 1 2 sent -1 0 - 7\n  3:\tproc  1 (Client:0) x\n")


def test_replay_with_an_unknown_event_names_both_files() -> None:
    with pytest.raises(TrailError, match=r"fencegate\.pml and model/trail\.py disagree"):
        parse_replay("  EV teleport 0 1 0 ok -1 0 - -1\n  3:\tproc  1 (Client:1) x\n")


def test_replay_of_unrelated_output_is_refused() -> None:
    with pytest.raises(TrailError, match="spin -t -p"):
        parse_replay("hello\n")


def test_the_package_exports_exactly_what_it_names() -> None:
    from fencegate import model

    assert sorted(model.__all__) == sorted(set(model.__all__))
    for name in model.__all__:
        assert getattr(model, name) is not None, name
