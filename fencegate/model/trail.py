"""A spin counterexample, translated into the lab's history events.

The model prints one structured line per protocol event (see the header of
fencegate.pml); `spin -t -p` replays the trail and prints them, each followed
by the step that executed it. This module turns that output into plain dicts
with exactly the keys of `lab.history.Event` (`at` is the step number), so the
lab's checker and timeline read a model trail like a recorded run.

Translation choices, each so the lab's rules read the trail as the model meant it:
- the moment a token is drawn is noted in the detail of the lease's acquire; a
  token drawn after the quorum (token-after) is also written back onto the
  acquire event: the lease carries that token, as the lab checker expects;
- a TTL passing while a client is inside a lease is a `pause` of that client,
  and its next event is preceded by a `resume`; while its request is in flight
  it is a `fault` on that client (the message was delayed past the TTL);
- node faults belong to client "lab", as the lab's own fault events do;
- in split-fence, the separate fence check is noted in the detail of the
  request's outcome (when it ran and against which mark);
- where a request may name one of two resources for the one key (the
  resource variants: any-resource and the bound-* ones), the resource it named is in
  the detail of each of its events: `lock` (the lock's name, what a request
  made with the lease sends as `Fencing-Resource`) or `key` (no header: the
  key is the resource); the moment an accepted request bound the key to its
  resource is noted on that request. A DELETE is a `delete` event; the lab's
  history format has none, and `report.history_lines` carries it there as a
  mark on its client's lane;
- in the proxy model (proxy.pml), each client holds one token (its lease
  `cN/1`, no lock). What the gateway sent to the store (the request, its
  precondition) and each 412 it got back are noted on the request's outcome;
  a request the gateway stopped waiting for is answered `error` (504, outcome
  unknown). The store's application of a request is an event of its own on the
  client's lane, with its `seq` (the gateway's answer, if it still waits,
  carries the same `seq`, as the lab's store and client record one request);
  so is the store's 412 to a request nobody waits for any more;
- a granted lease's `until` is the step its TTL passed, or one past the trail's
  end if it never did (time in the model has no other measure); fence-only
  "leases" are token epochs with no validity, so their `until` stays None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fencegate.model.errors import TrailError

_EVENT = re.compile(
    r"^\s*EV (?P<kind>\w+) (?P<client>-?\d+) (?P<it>\d+) (?P<token>\d+) (?P<outcome>\w+) "
    r"(?P<value>-?\d+) (?P<seq>\d+) (?P<detail>\S+) (?P<arg>-?\d+)\s*$"
)
_STEP = re.compile(r"^\s*(\d+):\s+proc\s")
_GLOBAL = re.compile(r"^\s+(\w+) = (-?\d+)\s*$")
_ASSERTION = re.compile(r"^spin: text of failed assertion: (.*)$")
_ENDS = re.compile(r"^spin: trail ends after (\d+) steps")

EVENT_KEYS = ("at", "client", "kind", "lease", "token", "outcome", "value", "seq", "until", "detail")
REQUEST_KINDS = ("read", "write", "delete")  # the store operations a client sends
RESOURCES = {1: "lock", 2: "key"}  # what the model prints for the resource a request named
# proxy.pml: what the gateway sent to the store (pkind) and the precondition it carried (pcond)
SENT = {1: "PUT", 2: "DELETE", 3: "PUT of a tombstone", 4: "PUT of the version read, with the reader's token"}
_STORE_KINDS = {1: "write", 4: "read"}  # what a request the store applied was part of; else a delete
CONDITIONS = {0: "unconditional", 1: "If-Match: e{etag}", 2: "If-None-Match: *"}


@dataclass
class Trail:
    """A replayed counterexample: the events, the counter at its end, and what failed."""

    events: list[dict[str, Any]] = field(default_factory=list)
    final: int = 0  # the counter when the trail ends
    acknowledged: int = 0  # writes the store acknowledged by then (proxy.pml: the highest token answered 2xx)
    value: int = 0  # proxy.pml: the counter the store holds when the trail ends
    increments: int = 0  # proxy.pml: the increments answered 2xx by then
    assertion: str | None = None  # the text of the failed assertion, None for other errors
    steps: int = 0

    def accepted(self) -> list[dict[str, Any]]:
        """The store operations the store accepted, in its acceptance order."""
        done = [e for e in self.events if e["kind"] in REQUEST_KINDS and e["seq"] is not None]
        return sorted(done, key=lambda e: e["seq"])


def parse_replay(text: str) -> Trail:
    """Read the output of `spin -t -p` on a trail of fencegate.pml."""
    trail = Trail()
    raw: list[tuple[re.Match[str], int | None]] = []
    pending: list[int] = []
    step = 0
    for line in text.splitlines():
        if match := _EVENT.match(line):
            raw.append((match, None))
            pending.append(len(raw) - 1)
        elif match := _STEP.match(line):
            step = int(match.group(1))
            for index in pending:
                raw[index] = (raw[index][0], step)
            pending.clear()
        elif match := _ASSERTION.match(line):
            trail.assertion = match.group(1).strip()
        elif match := _ENDS.match(line):
            trail.steps = int(match.group(1))
        elif match := _GLOBAL.match(line):
            if match.group(1) == "counter":
                trail.final = int(match.group(2))
            elif match.group(1) == "acked":
                trail.acknowledged = int(match.group(2))
            elif match.group(1) == "value":
                trail.value = int(match.group(2))
            elif match.group(1) == "incs":
                trail.increments = int(match.group(2))
    if not raw and trail.steps == 0:
        raise TrailError(
            "no model events and no trail end in the replay: was it produced by `spin -t -p` "
            "on fencegate.pml with the same -D flags as the search?"
        )
    _Translator(trail).run([(m, step if at is None else at) for m, at in raw])
    _validity(trail, float(max(step, trail.steps) + 1))
    return trail


def _validity(trail: Trail, end: float) -> None:
    """Give each granted lease the `until` of its validity: its expiry, or past the trail's end."""
    expired: dict[str, float] = {}
    for event in trail.events:
        if event["kind"] == "expire" and event["lease"] is not None:
            expired.setdefault(event["lease"], event["at"])
    for event in trail.events:
        if event["kind"] == "acquire" and event["outcome"] == "ok" and "no lock" not in event["detail"]:
            event["until"] = expired.get(event["lease"], end)


class _Translator:
    def __init__(self, trail: Trail) -> None:
        self.trail = trail
        self.paused: set[str] = set()
        self.acquires: dict[str, dict[str, Any]] = {}
        self.drawn: dict[str, str] = {}  # lease -> when its token was drawn, before its acquire
        self.notes: dict[str, str] = {}  # client -> a note for its request's outcome (fence check, binding)
        self.named: dict[str, str] = {}  # client -> the resource its request in flight named
        self.path: dict[str, list[str]] = {}  # client -> what the gateway sent the store for its request

    def run(self, lines: list[tuple[re.Match[str], int]]) -> None:
        for match, at in lines:
            self.line(match, float(at))

    def emit(self, **fields: Any) -> dict[str, Any]:
        event = {key: fields.get(key) for key in EVENT_KEYS}
        event["detail"] = fields.get("detail", "")
        self.trail.events.append(event)
        return event

    def line(self, m: re.Match[str], at: float) -> None:
        kind, outcome, detail = m["kind"], m["outcome"], m["detail"]
        number, it, arg = int(m["client"]), int(m["it"]), int(m["arg"])
        client = "lab" if number < 0 else f"c{number + 1}"
        lease = f"{client}/{it}" if it > 0 else None
        token = int(m["token"]) or None
        value = None if int(m["value"]) < 0 else int(m["value"])
        seq = int(m["seq"]) or None
        if kind == "final":
            self.trail.final, self.trail.acknowledged = value or 0, arg
            return
        if client in self.paused and kind not in ("expire", "pause", "fault"):
            self.paused.discard(client)
            self.emit(at=at, client=client, kind="resume", outcome="ok", detail="resumed after a TTL")
        if kind == "check":
            self.notes[client] = f"passed the fence at step {at:g}, against mark {arg}"
            return
        if kind == "bind":
            self.notes[client] = f"binds the key to resource {_resource(arg)}"
            return
        if kind == "forward":
            self.path.setdefault(client, []).append(_forwarded(detail, arg))
            return
        if kind == "precondition":
            self.path.setdefault(client, []).append("412 from the store")
            return
        if kind == "store":
            sent, unheard = int(detail) % 10, int(detail) >= 10
            self.emit(
                at=at, client=client, kind=_STORE_KINDS.get(sent, "delete"), lease=lease, token=token,
                outcome=outcome, value=value, seq=seq,
                detail="; ".join([*self.path.get(client, []), _delivered(outcome, sent, unheard, arg)]),
            )  # fmt: skip
            return
        if kind == "token":
            note = f"token {token} drawn {detail} the quorum, at step {at:g}"
            acquire = self.acquires.get(lease or "")
            if acquire is not None:
                acquire["token"] = token
                acquire["detail"] += f"; {note}"
            else:
                self.drawn[lease or ""] = note
            return
        if kind == "pause":
            self.paused.add(client)
            self.emit(at=at, client=client, kind="pause", outcome="ok", detail="a whole TTL passed")
        elif kind == "fault":
            self.emit(at=at, client=client, kind="fault", outcome="ok", detail=_fault_detail(detail, arg))
        elif kind == "expire":
            self.emit(at=at, client=client, kind="expire", lease=lease, outcome="ok", detail="TTL passed")
        elif kind == "acquire":
            notes = (_acquire_detail(detail, arg), self.drawn.pop(lease or "", ""))
            event = self.emit(
                at=at, client=client, kind="acquire", lease=lease, token=token, outcome=outcome,
                detail="; ".join(n for n in notes if n),
            )  # fmt: skip
            if outcome == "ok":
                self.acquires[lease or ""] = event
        elif kind in REQUEST_KINDS:
            self.emit(
                at=at, client=client, kind=kind, lease=lease, token=token, outcome=outcome,
                value=value, seq=seq, detail=self.request_detail(client, outcome, detail, arg),
            )  # fmt: skip
        elif kind == "release":
            note = "the lease had already expired" if outcome == "error" else ""
            self.emit(at=at, client=client, kind="release", lease=lease, token=token, outcome=outcome,
                      detail=note)  # fmt: skip
        else:
            raise TrailError(f"unknown model event {kind!r}: fencegate.pml and model/trail.py disagree")

    def request_detail(self, client: str, outcome: str, detail: str, arg: int) -> str:
        """The resource a request named, why it was refused, and what its acceptance did."""
        if outcome == "sent":
            if arg > 0:
                self.named[client] = _resource(arg)
                return f"names resource {self.named[client]}"
            return ""
        named = self.named.pop(client, None)
        notes = [f"resource {named}"] if named is not None and outcome == "ok" else []
        if detail == "stale":
            where = f"resource {named}'s mark" if named is not None else "the mark"
            notes.append(f"stale token: {where} is {arg}")
        elif detail == "wrong-resource":
            notes.append(f"the key belongs to resource {_resource(arg)}, not {named}")
        elif detail == "unbind":
            notes.append("the key is free again (no tombstone)")
        notes.extend(self.path.pop(client, []))
        notes.append(_answer(detail, arg))
        notes.append(self.notes.pop(client, ""))
        return "; ".join(n for n in notes if n)


def _resource(number: int) -> str:
    try:
        return RESOURCES[number]
    except KeyError:
        raise TrailError(f"unknown resource {number}: fencegate.pml and model/trail.py disagree") from None


def _forwarded(detail: str, etag: int) -> str:
    """proxy.pml prints pcond * 10 + pkind for what the gateway sent, and the ETag it checked."""
    code = int(detail)
    if code % 10 not in SENT or code // 10 not in CONDITIONS:
        raise TrailError(f"unknown request to the store {detail!r}: proxy.pml and model/trail.py disagree")
    return f"sent {SENT[code % 10]}, {CONDITIONS[code // 10].format(etag=etag)}"


def _answer(detail: str, arg: int) -> str:
    """The gateway's answer in proxy.pml, where it is more than accepted or stale."""
    if detail == "etag":
        return "applied at the store" + (f": version e{arg}" if arg > 0 else ": no version left")
    if detail == "stored":
        return f"409: the store holds token {arg}, nothing written"
    if detail == "absent":
        return "404: nothing to delete, nothing sent"
    if detail == "timeout":
        return "504: the gateway stopped waiting, the request is still on the path (outcome unknown)"
    if detail == "precondition":
        return f"412: the version is e{arg}, not the one the client read (its If-Match), nothing written"
    if detail == "retries":
        return "503: 412 again after a new read and attempt, nothing written"
    return ""


def _delivered(outcome: str, sent: int, unheard: bool, etag: int) -> str:
    """A request reaching the store: applied (the store's event, seq and all) or, unheard, refused."""
    what = SENT.get(sent)
    if what is None:
        raise TrailError(f"unknown request to the store {sent!r}: proxy.pml and model/trail.py disagree")
    made = f"version e{etag}" if etag > 0 else "no version left"
    if not unheard:
        return f"the store applies the {what} ({made})"
    if outcome == "ok":
        return f"the held {what} reaches the store after its 504 and is applied ({made}); nobody is told"
    return f"the held {what} reaches the store after its 504: 412, nothing written"


def _fault_detail(detail: str, arg: int) -> str:
    if detail == "delayed":
        return "its request was delayed in flight past the TTL"
    if detail == "restart":
        return f"redis-{arg} restarted without its keys"
    if detail == "clock-jump":
        return f"redis-{arg}'s clock jumped forward: its key expired early"
    if detail == "token-reset":
        return "the token source restarted without its counter: it issues tokens from 1 again"
    raise TrailError(f"unknown fault {detail!r}: fencegate.pml and model/trail.py disagree")


def _acquire_detail(detail: str, arg: int) -> str:
    if detail == "quorum":
        return f"SET NX won on {arg} nodes"
    if detail == "no-quorum":
        return f"no quorum: SET NX won on {arg} nodes only"
    if detail == "validity":
        return f"validity spent: a TTL passed during the attempt (SET NX won on {arg} nodes)"
    if detail == "token-only":
        return "token drawn, no lock"
    raise TrailError(f"unknown acquire detail {detail!r}: fencegate.pml and model/trail.py disagree")


__all__ = ["CONDITIONS", "EVENT_KEYS", "REQUEST_KINDS", "RESOURCES", "SENT", "Trail", "parse_replay"]
