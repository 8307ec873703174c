"""A goal's note, what the machine allows in the same run, is shown beside a goal that is not met."""

from __future__ import annotations

from fencegate.bench.section import Goal, Section


def _rendered(goal: Goal) -> str:
    return Section("s", "title", [], [goal]).render().splitlines()[-1]


def test_a_goal_not_met_shows_its_note() -> None:
    line = _rendered(Goal("ratio", 2.9, "<=", 1.5, "even raw sockets take 0.17 ms more"))
    assert line == "  goal ratio: 2.90 <= 1.50  [NOT met: even raw sockets take 0.17 ms more]"


def test_a_goal_met_keeps_its_note_to_the_json() -> None:
    goal = Goal("ratio", 1.2, "<=", 1.5, "even raw sockets take 0.17 ms more")
    assert _rendered(goal) == "  goal ratio: 1.20 <= 1.50  [met]"
    assert goal.as_dict()["note"] == "even raw sockets take 0.17 ms more"
