"""Hand-written histories with known answers, shared by the checker's and the report's tests."""

from __future__ import annotations

from fencegate.lab.history import Event, History, Meta


def acquire(
    at: float, client: str, lease: str, token: int | None = None, until: float | None = None
) -> Event:
    return Event(at, client, "acquire", lease, token, "ok", until=until)


def op(at: float, client: str, kind: str, lease: str, outcome: str, value: int, seq: int | None = None,
       token: int | None = None) -> Event:  # fmt: skip
    return Event(at, client, kind, lease, token, outcome, value=value, seq=seq)


def release(at: float, client: str, lease: str) -> Event:
    return Event(at, client, "release", lease, None, "ok")


def clean_run(meta: Meta) -> History:
    """Two clients taking turns; every lease released before the next begins."""
    events = [
        acquire(0.0, "c1", "c1/1", until=1.0),
        op(0.1, "c1", "read", "c1/1", "sent", 0),
        op(0.2, "c1", "read", "c1/1", "ok", 0, seq=1),
        op(0.3, "c1", "write", "c1/1", "sent", 1),
        op(0.4, "c1", "write", "c1/1", "ok", 1, seq=2),
        release(0.5, "c1", "c1/1"),
        acquire(0.6, "c2", "c2/1", until=1.6),
        op(0.7, "c2", "read", "c2/1", "ok", 1, seq=3),
        op(0.8, "c2", "write", "c2/1", "ok", 2, seq=4),
        release(0.9, "c2", "c2/1"),
    ]
    return History(meta, tuple(events), final=2)


def paused_holder(meta: Meta, *, fenced: bool) -> History:
    """Kleppmann's figure: c1 reads, pauses past its TTL, c2 acquires and writes, c1 wakes and writes."""
    stale_outcome, stale_seq = ("refused", None) if fenced else ("ok", 5)
    events = [
        acquire(0.0, "c1", "c1/1", token=33, until=1.0),
        op(0.1, "c1", "read", "c1/1", "ok", 0, seq=1, token=33),
        Event(0.2, "c1", "pause", "c1/1", 33, "ok", detail="SIGSTOP"),
        acquire(1.2, "c2", "c2/1", token=34, until=2.2),
        op(1.3, "c2", "read", "c2/1", "ok", 0, seq=2, token=34),
        op(1.4, "c2", "write", "c2/1", "ok", 1, seq=3, token=34),
        release(1.5, "c2", "c2/1"),
        Event(2.5, "c1", "resume", "c1/1", 33, "ok", detail="SIGCONT"),
        op(2.6, "c1", "write", "c1/1", "sent", 1, token=33),
        op(2.7, "c1", "write", "c1/1", stale_outcome, 1, seq=stale_seq, token=33),
    ]
    return History(meta, tuple(events), final=1)


def crowded_run(meta: Meta) -> History:
    """Everything at once: long fault notes a hair apart, six leases of 0.3 ms each with four-digit tokens
    and their writes 0.4 ms apart, in a run whose work spans a second (so the burst is a few pixels
    wide), then a long pause and a stale write at the figure's right edge."""
    partition = "partition: c1 reaches A, B, C; the others reach C, D, E"
    events = [
        Event(0.0, "c1", "fault", None, None, "ok", detail=partition),
        Event(0.0004, "c1", "fault", None, None, "ok", detail="redis-2 restarted empty"),
        Event(0.0008, "c2", "fault", None, None, "ok", detail="c2's wall clock +2s"),
    ]  # fmt: skip
    for i in range(9):
        spread = i >= 6  # the last three take their time, so the first six are a burst
        client, lease, token = f"c{i % 3 + 1}", f"c{i % 3 + 1}/{i // 3 + 1}", 5480 + i
        at = (i - 5) * 0.15 if spread else 0.001 + i * 0.0004
        events += [
            acquire(at, client, lease, token=token, until=at + 1.0),
            op(at + 0.0001, client, "read", lease, "ok", i, token=token),
            op(at + 0.0002, client, "write", lease, "ok", i + 1, seq=i + 1, token=token),
            release(at + 0.0003, client, lease),
        ]
    events += [
        acquire(0.5, "c1", "c1/4", token=5479, until=1.5),
        Event(0.5001, "c1", "pause", "c1/4", 5479, "ok", detail="SIGSTOP"),
        Event(3.0, "c1", "resume", "c1/4", 5479, "ok", detail="SIGCONT"),
        Event(3.0, "c1", "fault", None, None, "ok", detail="partition healed"),
        op(3.0001, "c1", "write", "c1/4", "refused", 9, token=5479),
    ]
    return History(meta, tuple(sorted(events, key=lambda e: e.at)), final=9)
