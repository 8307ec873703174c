"""Histories round-trip through JSON Lines, merge per-process files by time, and refuse bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from fencegate.lab.errors import HistoryError
from fencegate.lab.history import Event, EventLog, History, Meta, read_events

META = Meta(scenario="pause", mode="lock-only", lock="single", seed=7, clients=2)


def test_dump_and_load_round_trip_every_field(tmp_path: Path) -> None:
    events = (
        Event(1.0, "c1", "acquire", "c1/1", 4, "ok", until=1.5),
        Event(1.1, "c1", "read", "c1/1", 4, "ok", value=0, seq=1, detail="fenced read"),
        Event(1.2, "c1", "write", "c1/1", 4, "sent", value=1),
    )
    history = History(META, events, final=1)
    history.dump(tmp_path / "run.jsonl")
    assert History.load(tmp_path / "run.jsonl") == history


def test_merge_orders_events_of_many_processes_by_time(tmp_path: Path) -> None:
    with EventLog(tmp_path / "c1.jsonl") as log:
        log.record(Event(1.0, "c1", "acquire", "c1/1", None, "ok"))
        log.record(Event(3.0, "c1", "release", "c1/1", None, "ok"))
    with EventLog(tmp_path / "c2.jsonl") as log:
        log.record(Event(2.0, "c2", "acquire", "c2/1", None, "refused"))
    merged = History.merge([tmp_path / "c1.jsonl", tmp_path / "c2.jsonl"], meta=META, final=0)
    assert [(e.at, e.client) for e in merged.events] == [(1.0, "c1"), (2.0, "c2"), (3.0, "c1")]
    assert merged.final == 0
    assert set(merged.by_client()) == {"c1", "c2"}


def test_merge_skips_the_torn_last_line_of_a_killed_writer(tmp_path: Path) -> None:
    path = tmp_path / "c1.jsonl"
    with EventLog(path) as log:
        log.record(Event(1.0, "c1", "acquire", "c1/1", None, "ok"))
    with path.open("a") as out:
        out.write('{"at": 2.0, "client": "c1", "ki')
    assert len(read_events(path)) == 1


def test_a_torn_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "c1.jsonl"
    path.write_text('{"at": 2.0\n{"at": 1.0}\n')
    with pytest.raises(HistoryError, match=r"c1\.jsonl:1: not JSON"):
        read_events(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "grab"}, "event kind 'grab'"),
        ({"outcome": "maybe"}, "event outcome 'maybe'"),
        ({"client": ""}, "client is empty"),
        ({"kind": "acquire", "seq": 3}, "only read and write events carry a store seq"),
        ({"at": "soon"}, "event time 'soon' is not a number"),
        ({"token": 1.5}, "event token 1.5 is not an integer"),
        ({"seq": True}, "event seq True is not an integer"),
    ],
)
def test_a_malformed_event_is_refused_with_the_fix(change: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"at": 1.0, "client": "c1", "kind": "read", "lease": "c1/1"}
    fields |= {"token": None, "outcome": "ok"} | change
    with pytest.raises(HistoryError, match=message):
        Event.from_json(fields)


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(HistoryError, match="unknown event fields"):
        Event.from_json({"at": 1.0, "client": "c1", "kind": "read", "lease": None, "token": None,
                         "outcome": "ok", "colour": "red"})  # fmt: skip


def test_a_file_without_header_does_not_load(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        log.record(Event(1.0, "c1", "acquire", "c1/1", None, "ok"))
    with pytest.raises(HistoryError, match="no header line"):
        History.load(path)
