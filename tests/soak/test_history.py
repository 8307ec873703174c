"""The soak's checker catches what it claims to: a write applied twice, retries answered differently,
an acknowledged unleased write missing or changed, a refused one stored. Histories written by hand."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from fencegate.soak.history import Call, SoakHistory, check, check_unleased, retries


def put(key: str, token: int, status: int | None, *, version: int | None = None, answer: bytes = b"") -> Call:
    body = f"w0 {key} t{token}".encode()
    return Call(0, 0, "PUT", key, token, body, 0.0, 0.1, status, version, f"c0-{key}-{token}", answer)


def test_a_write_retried_and_applied_once_passes() -> None:
    calls = [put("k1", 5, None), put("k1", 5, 503), put("k1", 5, 201, version=1, answer=b"a")]
    calls.append(put("k1", 5, 201, version=1, answer=b"a"))  # the confirming replay
    found = retries(calls, Counter({("k1", 5): 1}))
    assert (found.writes, found.attempts, found.unknown) == (1, 3, 0)
    assert found.applied_twice == []
    assert found.answers_differ == []


def test_a_write_applied_twice_is_caught() -> None:
    found = retries([put("k1", 5, None), put("k1", 5, 201, version=2)], Counter({("k1", 5): 2}))
    assert len(found.applied_twice) == 1


def test_retries_answered_differently_are_caught() -> None:
    calls = [put("k1", 5, None), put("k1", 5, 201, version=1, answer=b"a"), put("k1", 5, 200, answer=b"b")]
    assert len(retries(calls, Counter({("k1", 5): 1})).answers_differ) == 1


def test_a_write_without_any_definite_answer_is_unknown() -> None:
    assert retries([put("k1", 5, None), put("k1", 5, 503)], Counter()).unknown == 1


def test_an_acknowledged_unleased_write_missing_or_changed_is_lost() -> None:
    ok, missing, changed = (
        put("a", 1, 201, version=1),
        put("b", 1, 201, version=1),
        put("c", 1, 201, version=1),
    )
    objects = {"a": (ok.body, 1), "c": (b"other bytes", 1)}
    audited = Counter({("a", 1): 1, ("b", 1): 1, ("c", 1): 1})
    acked, lost, violations = check_unleased([ok, missing, changed], objects, audited)
    assert (acked, lost) == (3, 2)
    assert [v.split(":")[1].strip() for v in violations] == ["b", "c"]


def test_an_acknowledged_unleased_write_the_audit_trail_lacks_is_lost() -> None:
    ok = put("a", 1, 201, version=1)
    assert check_unleased([ok], {"a": (ok.body, 1)}, Counter())[1] == 1


def test_a_refused_unleased_write_that_was_stored_is_a_violation() -> None:
    refused = put("a", 1, 409)
    _, lost, violations = check_unleased([refused], {"a": (refused.body, 1)}, Counter())
    assert lost == 0
    assert violations == ["invariant 2: a: its write was refused, yet the key exists"]


def test_check_fails_a_run_whose_retried_write_was_applied_twice() -> None:
    history = SoakHistory(unleased=[put("a", 1, None), put("a", 1, 201, version=1, answer=b"x")])
    verdict = check(history, {}, Counter({("a", 1): 2}), 1.0, objects={"a": (history.unleased[0].body, 1)})
    assert verdict.lost == 0
    assert any("applied 2 times" in v for v in verdict.violations)


def at(key: str, token: int, status: int | None, start: float, end: float) -> Call:
    """An unleased write of `key` under the resource "r", sent at `start`, answered at `end`."""
    body = f"w0 {key} t{token}".encode()
    version = 1 if status == 201 else None
    return Call(0, 0, "PUT", key, token, body, start, end, status, version, f"c0-{key}-{token}", b"", "r")


def test_an_unleased_write_with_a_lower_token_accepted_after_a_newer_one_is_a_violation() -> None:
    """A fence that accepts every token but keeps its marks and audit trail: the clients' order shows it."""
    newer, stale = at("k1", 5, 201, 0.0, 1.0), at("k2", 4, 201, 2.0, 3.0)
    objects = {c.key: (c.body, 1) for c in (newer, stale)}
    _, lost, violations = check_unleased([newer, stale], objects, Counter({("k1", 5): 1, ("k2", 4): 1}))
    assert lost == 0
    assert violations == ["invariant 1: r: k2 with token 4 accepted after k1 with token 5 was acknowledged"]


def test_a_lower_token_first_sent_before_the_newer_was_acknowledged_may_commit_first() -> None:
    """Its answer was lost and its retry came late, but its first attempt may have committed first."""
    newer = at("k1", 5, 201, 0.5, 1.0)
    first, retry = at("k2", 4, None, 0.0, 0.9), at("k2", 4, 201, 2.0, 3.0)
    objects = {"k1": (newer.body, 1), "k2": (retry.body, 1)}
    audited = Counter({("k1", 5): 1, ("k2", 4): 1})
    assert check_unleased([newer, first, retry], objects, audited) == (2, 0, [])


def test_writes_without_an_idempotency_key_are_each_timed_by_their_own_send() -> None:
    """Keyless writes are not attempts of one write: an early one must not move a later one's send back."""
    early, newer = replace(at("k0", 1, 201, 0.0, 0.2), idempotency_key=""), at("k1", 5, 201, 0.5, 1.0)
    stale = replace(at("k2", 4, 201, 2.0, 3.0), idempotency_key="")
    objects = {c.key: (c.body, 1) for c in (early, newer, stale)}
    audited = Counter({("k0", 1): 1, ("k1", 5): 1, ("k2", 4): 1})
    _, _, violations = check_unleased([early, newer, stale], objects, audited)
    assert violations == ["invariant 1: r: k2 with token 4 accepted after k1 with token 5 was acknowledged"]
