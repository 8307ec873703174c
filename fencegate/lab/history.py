"""The recorded history of one lab run: what every client did and what the store accepted.

Each client process appends `Event`s to its own JSON Lines file (one JSON
object per line, flushed per event, so a SIGKILLed client loses at most the
line it was writing). `History.merge` reads those files into one history
ordered by time; the timestamps are CLOCK_MONOTONIC seconds, which every
process on one machine shares, so events of different processes compare.
The spin model converts its trails into the same shape, with step numbers
as `at`.

A merged history file starts with one header line (`{"history": 1, ...}`,
holding the metadata and the final counter value) followed by the events.
Malformed input raises `HistoryError` and never yields a partial history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, TextIO

from fencegate.lab.errors import HistoryError

FORMAT_VERSION = 1
KINDS = frozenset({"acquire", "release", "expire", "read", "write", "pause", "resume", "fault"})
OUTCOMES = frozenset({"ok", "refused", "error", "sent"})
STORE_KINDS = frozenset({"read", "write"})


@dataclass(frozen=True)
class Event:
    """One thing that happened, seen by one client (or by the lab, for faults)."""

    at: float  # CLOCK_MONOTONIC seconds; the model uses step numbers
    client: str  # "c1"; faults injected by the lab use the client they aim at, or "lab"
    kind: str  # one of KINDS
    lease: str | None  # unique per acquisition ("c1/3"); in fence-only mode the token epoch
    token: int | None
    outcome: str  # one of OUTCOMES; "sent" marks the moment a request left the client
    value: int | None = None  # the counter value read or written
    seq: int | None = None  # the store's acceptance order, for store operations it accepted
    until: float | None = None  # acquire only: when the lease's validity ends, same clock as `at`
    detail: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.at, bool) or not isinstance(self.at, int | float):
            raise HistoryError(f"event time {self.at!r} is not a number: use CLOCK_MONOTONIC seconds")
        for name in ("token", "value", "seq"):
            number = getattr(self, name)
            if number is not None and (isinstance(number, bool) or not isinstance(number, int)):
                raise HistoryError(f"event {name} {number!r} is not an integer or null")
        if self.kind not in KINDS:
            raise HistoryError(f"event kind {self.kind!r} is not one of {sorted(KINDS)}")
        if self.outcome not in OUTCOMES:
            raise HistoryError(f"event outcome {self.outcome!r} is not one of {sorted(OUTCOMES)}")
        if not self.client:
            raise HistoryError("event client is empty: name the client that saw the event, e.g. 'c1'")
        if self.seq is not None and self.kind not in STORE_KINDS:
            raise HistoryError(f"only read and write events carry a store seq, not {self.kind!r}")

    @property
    def accepted(self) -> bool:
        """True for a store operation the store accepted (it carries the acceptance order)."""
        return self.kind in STORE_KINDS and self.outcome == "ok" and self.seq is not None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Event:
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise HistoryError(f"unknown event fields {sorted(unknown)}; an event has {sorted(names)}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise HistoryError(f"malformed event {dict(data)!r}: {exc}") from exc


@dataclass(frozen=True)
class Meta:
    """What was run: the same seed gives the same schedule of faults in every mode."""

    scenario: str
    mode: str  # "lock-only" | "fenced" | "fence-only"
    lock: str  # "redlock" | "single" | "setnx-getset" | "none"
    seed: int
    tokens: str | None = None  # the token source, where the mode draws tokens
    clients: int | None = None


@dataclass(frozen=True)
class History:
    """All events of one run in time order, the final counter value and what was run."""

    meta: Meta
    events: tuple[Event, ...] = ()
    final: int | None = None  # the counter read back after every client stopped
    initial: int = 0

    def with_final(self, final: int) -> History:
        return replace(self, final=final)

    def by_client(self) -> dict[str, list[Event]]:
        lanes: dict[str, list[Event]] = {}
        for event in self.events:
            lanes.setdefault(event.client, []).append(event)
        return lanes

    # -- files ----------------------------------------------------------------

    def dump(self, path: Path | str) -> None:
        """Write the header line and every event; replaced atomically."""
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        with tmp.open("w") as out:
            header = {
                "history": FORMAT_VERSION,
                "meta": asdict(self.meta),
                "final": self.final,
                "initial": self.initial,
            }
            out.write(json.dumps(header) + "\n")
            for event in self.events:
                out.write(json.dumps(event.to_json()) + "\n")
        tmp.replace(target)

    @classmethod
    def load(cls, path: Path | str) -> History:
        with Path(path).open() as src:
            lines = list(_lines(src, str(path)))
        if not lines or "history" not in lines[0]:
            raise HistoryError(f"{path}: no header line; write history files with History.dump")
        header = lines[0]
        if header["history"] != FORMAT_VERSION:
            raise HistoryError(f"{path}: format {header['history']!r}, this lab reads {FORMAT_VERSION}")
        try:
            meta = Meta(**header["meta"])
        except TypeError as exc:
            raise HistoryError(f"{path}: malformed metadata {header['meta']!r}: {exc}") from exc
        events = tuple(Event.from_json(line) for line in lines[1:])
        return cls(meta, events, header.get("final"), header.get("initial", 0))

    @classmethod
    def merge(
        cls, paths: Iterable[Path | str], *, meta: Meta, final: int | None = None, initial: int = 0
    ) -> History:
        """One history from per-process event files, ordered by time (ties keep file order)."""
        events: list[tuple[float, int, int, Event]] = []
        for file_index, path in enumerate(paths):
            with Path(path).open() as src:
                for line_index, data in enumerate(_lines(src, str(path), tolerate_torn_tail=True)):
                    event = Event.from_json(data)
                    events.append((event.at, file_index, line_index, event))
        events.sort(key=lambda item: item[:3])
        return cls(meta, tuple(item[3] for item in events), final, initial)


def _lines(src: TextIO, name: str, *, tolerate_torn_tail: bool = False) -> Iterator[dict[str, Any]]:
    """Parsed JSON objects; a killed writer may leave a torn last line, which merge skips."""
    raw = src.read().split("\n")
    for number, line in enumerate(raw, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if tolerate_torn_tail and number == len(raw):
                return  # the last line, not newline-terminated: its writer died mid-write
            raise HistoryError(f"{name}:{number}: not JSON ({exc}); each line must be one event") from exc
        if not isinstance(data, dict):
            raise HistoryError(f"{name}:{number}: expected a JSON object, got {type(data).__name__}")
        yield data


class EventLog:
    """Appends one process's events to its JSON Lines file, one flushed line per event."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._file = self.path.open("a", buffering=1)

    def record(self, event: Event) -> Event:
        self._file.write(json.dumps(event.to_json()) + "\n")
        self._file.flush()
        return event

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_events(path: Path | str) -> Sequence[Event]:
    """The events of one per-process file (a torn last line is skipped)."""
    with Path(path).open() as src:
        return [Event.from_json(data) for data in _lines(src, str(path), tolerate_torn_tail=True)]


__all__ = ["KINDS", "OUTCOMES", "Event", "EventLog", "History", "Meta", "read_events"]
