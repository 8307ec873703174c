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

import contextlib
import json
import math
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
        # A file may hold any JSON: every field's type is checked here, so the checker and the report
        # never meet a value they cannot compare or print.
        if not _is_number(self.at):
            raise HistoryError(f"event time {self.at!r} is not a number: use CLOCK_MONOTONIC seconds")
        if self.until is not None and not _is_number(self.until):
            raise HistoryError(f"event until {self.until!r} is not a number or null: use the clock of `at`")
        for name in ("token", "value", "seq"):
            number = getattr(self, name)
            if number is not None and not _is_int(number):
                raise HistoryError(f"event {name} {number!r} is not an integer or null")
        if not _is_text(self.kind) or self.kind not in KINDS:
            raise HistoryError(f"event kind {self.kind!r} is not one of {sorted(KINDS)}")
        if not _is_text(self.outcome) or self.outcome not in OUTCOMES:
            raise HistoryError(f"event outcome {self.outcome!r} is not one of {sorted(OUTCOMES)}")
        if not _is_text(self.client):
            raise HistoryError(f"event client {self.client!r} is not a client's name, e.g. 'c1'")
        if not self.client:
            raise HistoryError("event client is empty: name the client that saw the event, e.g. 'c1'")
        if self.lease is not None and not _is_text(self.lease):
            raise HistoryError(f"event lease {self.lease!r} is not a lease's name (e.g. 'c1/1') or null")
        if not _is_text(self.detail):
            raise HistoryError(f"event detail {self.detail!r} is not text")
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
    store: str = "gateway"  # where the counter lived: "gateway" (the built-in store) or "sql" (a user table)

    def __post_init__(self) -> None:
        for name in ("scenario", "mode", "lock", "store"):
            if not _is_text(getattr(self, name)):
                raise HistoryError(f"{name} {getattr(self, name)!r} is not a name")
        if not _is_int(self.seed):
            raise HistoryError(f"seed {self.seed!r} is not an integer")
        if self.tokens is not None and not _is_text(self.tokens):
            raise HistoryError(f"tokens {self.tokens!r} is not a token source's name or null")
        if self.clients is not None and not _is_int(self.clients):
            raise HistoryError(f"clients {self.clients!r} is not an integer or null")


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
        """A file `dump` wrote; anything else raises `HistoryError` naming the file and the line."""
        with Path(path).open() as src:
            lines = list(_lines(src, str(path)))
        if not lines or "history" not in lines[0][1]:
            raise HistoryError(f"{path}: no header line; write history files with History.dump")
        number, header = lines[0]
        if header["history"] != FORMAT_VERSION:
            raise HistoryError(
                f"{path}:{number}: format {header['history']!r}, this lab reads {FORMAT_VERSION}"
            )
        with _at(path, number):
            if not isinstance(header.get("meta"), dict):
                raise HistoryError(f"metadata {header.get('meta')!r} is not a JSON object")
            try:
                meta = Meta(**header["meta"])
            except TypeError as exc:
                raise HistoryError(f"malformed metadata {header['meta']!r}: {exc}") from exc
            final, initial = header.get("final"), header.get("initial", 0)
            for name, number_or_null in (("final", final), ("initial", initial)):
                if number_or_null is not None and not _is_int(number_or_null):
                    raise HistoryError(f"{name} {number_or_null!r} is not an integer or null")
        events = tuple(_event(path, number, data) for number, data in lines[1:])
        return cls(meta, events, final, initial or 0)

    @classmethod
    def merge(
        cls, paths: Iterable[Path | str], *, meta: Meta, final: int | None = None, initial: int = 0
    ) -> History:
        """One history from per-process event files, ordered by time (ties keep file order)."""
        events: list[tuple[float, int, int, Event]] = []
        for file_index, path in enumerate(paths):
            with Path(path).open() as src:
                for number, data in _lines(src, str(path), tolerate_torn_tail=True):
                    event = _event(path, number, data)
                    events.append((event.at, file_index, number, event))
        events.sort(key=lambda item: item[:3])
        return cls(meta, tuple(item[3] for item in events), final, initial)


@contextlib.contextmanager
def _at(path: Path | str, number: int) -> Iterator[None]:
    """A `HistoryError` raised in the block names the file and the line it came from."""
    try:
        yield
    except HistoryError as exc:
        raise HistoryError(f"{path}:{number}: {exc}") from exc


def _event(path: Path | str, number: int, data: Mapping[str, Any]) -> Event:
    with _at(path, number):
        return Event.from_json(data)


def _lines(
    src: TextIO, name: str, *, tolerate_torn_tail: bool = False
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, parsed JSON object); a killed writer may leave a torn last line, which merge skips."""
    try:
        raw = src.read().split("\n")
    except UnicodeDecodeError as exc:
        raise HistoryError(
            f"{name}: not UTF-8 text (byte {exc.start}: {exc.reason}); a history is JSON lines, one event "
            "a line, as `lab run --workdir DIR` writes them"
        ) from exc
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
        yield number, data


# A file may hold any JSON where a field wants a type: these tell, for the checks of Event and Meta.
def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text(value: object) -> bool:
    return isinstance(value, str)


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
        return [
            _event(path, number, data) for number, data in _lines(src, str(path), tolerate_torn_tail=True)
        ]


__all__ = ["KINDS", "OUTCOMES", "Event", "EventLog", "History", "Meta", "read_events"]
