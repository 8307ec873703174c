"""The checker: a pure function from a recorded `History` to a `Verdict`.

Safety verdict (what fencing promises):
- lost updates: acknowledged increments minus (final - initial) counter value,
  never below zero. Every acknowledged write of the workload is one increment;
  a write recorded twice with one `seq` (by its client and by the store) is one.
- interleaved leases: fencing promises that the operations under each lease are
  contiguous at the store. Walking the accepted store operations in the store's
  acceptance order (`seq`), a request from lease A accepted after the store had
  already accepted one from a later lease B (the store saw A, B, A, or B then a
  stale A) is an interleaved request; its lease is an interleaved lease. Every
  break of contiguity yields at least one. "Later" is token order when every
  lease carries a token (ties, which a regressed token source produces, broken
  by acquisition time), acquisition order otherwise; the lease id breaks what
  is left, so no two leases rank equal.

What explains the verdict:
- refused requests: store operations refused (stale token);
- zombie requests: store requests sent after the sender's lease had ended by its
  own validity (`until` of its acquire) or by an `expire` event, accepted or not;
  a request recorded by its client and by the store (one `seq`) is one request;
- overlapping leases: pairs of leases that were valid at the same instant. The
  history holds one resource, so every pair counts. A lease is valid from its
  acquire until the earliest of its `until`, its `expire` and the moment its
  release left the client (from then on the holder no longer acts under the
  lease, whether or not the node still had its key; timing the end by the
  release's answer would count a scheduling delay between two processes as an
  overlap); leases without a validity end (fence-only mode draws tokens, no
  lock) take no part.

A history the recorder never writes raises `CheckerError` instead of getting a
verdict, since judging it could hide a loss or an interleaving (an `Event`
refuses a time that is not a finite number itself): events out of
time order; a lease acquired twice; a store
request or release whose lease was not acquired before it; a `seq` on a request
that was not accepted, an acknowledged write without one, or one `seq` on two
different requests; a read answered before any write left that did not see the
initial value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from fencegate.lab.errors import CheckerError
from fencegate.lab.history import STORE_KINDS, Event, History


@dataclass(frozen=True)
class LeaseSpan:
    """One acquisition as the checker sees it."""

    lease: str
    client: str
    token: int | None
    start: float
    expires: float  # earliest of `until` and an `expire` event; math.inf if it claimed no validity
    end: float  # `expires`, or the release if that came first


@dataclass(frozen=True)
class Verdict:
    """The checker's numbers for one run, with the offending items to point at."""

    ops: int  # leases obtained (each starts one acquire-read-write iteration)
    acknowledged: int  # writes the store acknowledged
    final: int
    lost_updates: int
    interleaved_leases: int
    refused: int
    zombie_requests: int
    overlaps: int
    interleaved: tuple[int, ...] = ()  # seqs of the interleaved requests
    zombies: tuple[int, ...] = ()  # indexes in History.events of the zombie requests (their send event)
    overlapping: tuple[tuple[str, str], ...] = ()  # lease pairs

    @property
    def safe(self) -> bool:
        return self.lost_updates == 0 and self.interleaved_leases == 0


def check(history: History) -> Verdict:
    """Judge one run; raises `CheckerError` if the history lacks its final counter value or is malformed."""
    if history.final is None:
        raise CheckerError(
            "the history has no final counter value: read the counter after the clients stop "
            "and record it with History.with_final(value)"
        )
    _refuse_malformed(history)
    events = history.events
    spans = lease_spans(events)
    # one acknowledged write may be recorded by its client and by the store: count each seq once
    acknowledged = len({e.seq for e in events if e.kind == "write" and e.outcome == "ok"})
    interleaved_seqs, interleaved = _interleavings(events, spans)
    zombies = _zombies(events, spans)
    overlapping = _overlaps(spans.values())
    return Verdict(
        ops=sum(1 for e in events if e.kind == "acquire" and e.outcome == "ok"),
        acknowledged=acknowledged,
        final=history.final,
        lost_updates=max(0, acknowledged - (history.final - history.initial)),
        interleaved_leases=len(interleaved),
        refused=sum(1 for e in events if e.kind in STORE_KINDS and e.outcome == "refused"),
        zombie_requests=len(zombies),
        overlaps=len(overlapping),
        interleaved=tuple(interleaved_seqs),
        zombies=tuple(zombies),
        overlapping=tuple(overlapping),
    )


def _refuse_malformed(history: History) -> None:
    """Raise `CheckerError` for what the recorder never writes: judged, it could hide a loss or an A, B, A."""
    acquired: set[str] = set()
    requests: dict[int, tuple[str, str | None, int | None]] = {}  # seq -> the one request it names
    first_write = min((e.at for e in history.events if e.kind == "write"), default=math.inf)
    previous = -math.inf
    for index, event in enumerate(history.events):
        where = f"event {index} ({event.client} {event.kind} {event.outcome} at {event.at:g})"
        if event.at < previous:
            raise CheckerError(f"{where} is out of time order: build histories with History.merge")
        previous = event.at
        if event.kind == "acquire" and event.outcome == "ok" and event.lease is not None:
            if event.lease in acquired:
                raise CheckerError(f"{where}: lease {event.lease} acquired twice; one id per acquisition")
            acquired.add(event.lease)
        if event.kind in STORE_KINDS or event.kind == "release":
            if event.lease is None:
                raise CheckerError(f"{where} names no lease: every request is made under one")
            if event.lease not in acquired:
                raise CheckerError(f"{where} names lease {event.lease}, not acquired before it")
        if event.seq is not None:
            if event.outcome != "ok":
                raise CheckerError(f"{where} carries seq {event.seq}: only an accepted request has one")
            request = (event.kind, event.lease, event.value)
            if requests.setdefault(event.seq, request) != request:
                raise CheckerError(f"{where}: seq {event.seq} already names {requests[event.seq]}")
        elif event.kind == "write" and event.outcome == "ok":
            raise CheckerError(f"{where} is acknowledged without a seq: its place in the store is unknown")
        early_read = event.kind == "read" and event.outcome == "ok" and event.at < first_write
        if early_read and event.value not in (None, history.initial):
            raise CheckerError(
                f"{where} read {event.value} before any write left, but the initial value is "
                f"{history.initial}: record the counter's start in History.initial"
            )


def lease_spans(events: Iterable[Event]) -> dict[str, LeaseSpan]:
    """Each acquired lease with the interval in which it was valid."""
    acquired: dict[str, Event] = {}
    expired: dict[str, float] = {}
    released: dict[str, float] = {}
    for event in events:
        if event.lease is None:
            continue
        if event.kind == "acquire" and event.outcome == "ok":
            acquired.setdefault(event.lease, event)
        elif event.kind == "expire" and event.outcome != "sent":
            expired[event.lease] = min(expired.get(event.lease, math.inf), event.at)
        elif event.kind == "release":  # given up when the release left, whatever the node said
            released[event.lease] = min(released.get(event.lease, math.inf), event.at)
    spans = {}
    for name, event in acquired.items():
        expires = min(math.inf if event.until is None else event.until, expired.get(name, math.inf))
        end = min(expires, released.get(name, math.inf))
        spans[name] = LeaseSpan(name, event.client, event.token, event.at, expires, end)
    return spans


def _interleavings(events: Iterable[Event], spans: dict[str, LeaseSpan]) -> tuple[list[int], set[str]]:
    # a store and its client may both record one op: one seq, one lease
    accepted = {e.seq: e.lease for e in events if e.accepted and e.seq is not None and e.lease is not None}
    by_token = all(s.token is not None for s in spans.values())

    def rank(lease: str) -> tuple[float, float, str]:
        """Lease order; the lease id breaks a tie, so two leases never rank equal and every A, B, A shows."""
        span = spans[lease]
        if by_token and span.token is not None:
            return (span.token, span.start, lease)
        return (span.start, 0.0, lease)

    latest: tuple[float, float, str] | None = None
    seqs: list[int] = []
    leases: set[str] = set()
    for seq in sorted(accepted):
        mine = rank(accepted[seq])
        if latest is not None and mine < latest:
            seqs.append(seq)
            leases.add(accepted[seq])
        else:
            latest = mine
    return seqs, leases


def _zombies(events: tuple[Event, ...], spans: dict[str, LeaseSpan]) -> list[int]:
    """Send events of store requests whose lease had already ended when they left the client."""
    open_request: dict[tuple[str, str], int] = {}  # (client, kind) -> index of its "sent" event
    sends: list[int] = []
    unsent: list[int] = []  # outcomes recorded without a send event
    counted: set[int] = set()  # seqs of requests already among `sends`
    for index, event in enumerate(events):
        if event.kind not in STORE_KINDS:
            continue
        key = (event.client, event.kind)
        if event.outcome == "sent":
            open_request[key] = index
            sends.append(index)
        elif open_request.pop(key, None) is None:
            unsent.append(index)
        elif event.seq is not None:
            counted.add(event.seq)
    for index in unsent:  # its outcome is its send instant, unless its seq is a request already counted
        seq = events[index].seq
        if seq not in counted:
            sends.append(index)
        if seq is not None:
            counted.add(seq)
    zombies = []
    for index in sorted(sends):
        event = events[index]
        span = spans.get(event.lease or "")
        if span is not None and event.at > span.expires:
            zombies.append(index)
    return zombies


def _overlaps(spans: Iterable[LeaseSpan]) -> list[tuple[str, str]]:
    bounded = sorted((s for s in spans if not math.isinf(s.expires)), key=lambda s: s.start)
    pairs = []
    for i, first in enumerate(bounded):
        for second in bounded[i + 1 :]:
            if second.start >= first.end:
                break
            pairs.append((first.lease, second.lease))
    return pairs


__all__ = ["LeaseSpan", "Verdict", "check", "lease_spans"]
