"""The path from the gateway's replicas to an upstream store, held, reordered, timed out (proxy.pml).

The store's own compare-and-swap is what keeps the token order there: the
unconditional proxy (trust-path) is the control that drops it, and must fail
the very properties the conditional proxy verifies. Each half of the delete
rule is dropped in turn and must show its own counterexample. Every check
reads what the store applied (its `seq` order), not only the gateway's answers.
"""

from __future__ import annotations

from typing import Any

from fencegate.model.cli import Cache, run_checks
from fencegate.model.report import variant_verdict
from fencegate.model.runner import CheckResult
from fencegate.model.trail import Trail
from fencegate.model.variants import PROPERTIES, PROXY_MODEL, VARIANTS, applicable, promised
from tests.model.conftest import counterexample, parse_check_args

PROXY = [name for name, v in VARIANTS.items() if v.model == PROXY_MODEL]
# the verdicts docs/model.md explains, at the main table's sizes (2 clients, one request each, one timeout)
VERDICTS = {
    "proxy-trust-path": {"store-order": "violated", "no-recreate": "violated", "acked-durable": "violated"},
    "proxy-conditional": {"store-order": "holds", "no-recreate": "holds", "acked-durable": "holds"},
    "proxy-no-tombstone": {"store-order": "holds", "no-recreate": "violated", "acked-durable": "holds"},
    "proxy-blind-delete": {"store-order": "violated", "no-recreate": "holds", "acked-durable": "violated"},
    "proxy-bare-tombstone": {
        "store-order": "violated",
        "no-recreate": "violated",
        "acked-durable": "violated",
    },
    "proxy-increments": {"store-order": "holds", "no-recreate": "holds", "acked-durable": "holds"},
    "proxy-read-raises": {"store-order": "holds", "no-recreate": "holds", "acked-durable": "holds"},
    "proxy-if-match": {"store-order": "holds", "no-recreate": "holds", "acked-durable": "holds"},
}
# clients that write blind count no increment: the property is theirs only where the workload reads
INCREMENTS = {"proxy-increments": "violated", "proxy-read-raises": "holds", "proxy-if-match": "holds"}


def _applied(trail: Trail) -> list[dict[str, Any]]:
    """What the store applied or served, once each, in its order (the gateway's answer repeats its seq)."""
    seen: dict[int, dict[str, Any]] = {}
    for event in trail.events:
        if event["seq"] is not None:
            seen.setdefault(event["seq"], event)
    return [seen[seq] for seq in sorted(seen)]


def _below_an_earlier(applied: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Requests the store applied after one with a higher token."""
    return [e for i, e in enumerate(applied) if any(a["token"] > e["token"] for a in applied[:i])]


def test_the_proxy_variants_have_the_store_properties_and_only_those() -> None:
    assert list(VERDICTS) == PROXY
    for variant in PROXY:
        assert promised(variant) == {"store-order", "no-recreate", "acked-durable", "increments"}
        assert applicable(variant, list(PROPERTIES)) == [
            "store-order", "no-recreate", "acked-durable", "increments"
        ]  # fmt: skip
    assert "store-order" not in applicable("fenced", list(PROPERTIES))


def test_each_proxy_variant_gets_its_verdict(by_key: dict[tuple[str, str], CheckResult]) -> None:
    found = {v: {p: by_key[(v, p)].verdict for p in VERDICTS[v]} for v in PROXY}
    assert found == VERDICTS
    assert {v: by_key[(v, "increments")].verdict for v in INCREMENTS} == INCREMENTS
    assert all(by_key[(v, p)].report.complete for v in PROXY for p in promised(v))
    safe = {v: variant_verdict([by_key[(v, p)] for p in promised(v)]) for v in PROXY}
    assert [v for v, verdict in safe.items() if verdict == "safe"] == [
        "proxy-conditional",
        "proxy-read-raises",
        "proxy-if-match",
    ]


def test_the_unconditional_proxy_applies_a_held_write_after_a_newer_one(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    trail = counterexample(by_key[("proxy-trust-path", "store-order")])
    stale = _below_an_earlier(_applied(trail))
    assert stale, trail.events
    held = stale[-1]
    assert held["kind"] == "write"
    assert "unconditional" in " ".join(e["detail"] for e in trail.events if e["client"] == held["client"])


def test_the_unconditional_proxy_ends_with_a_stale_write_over_an_acknowledged_one(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    trail = counterexample(by_key[("proxy-trust-path", "acked-durable")])
    answered = [
        e
        for e in trail.events
        if e["outcome"] == "ok" and e["kind"] == "write" and "applied at" in e["detail"]
    ]
    assert answered
    assert trail.final < trail.acknowledged == max(e["token"] for e in answered)
    assert _applied(trail)[-1]["token"] == trail.final


def test_without_a_timeout_both_writes_are_answered_201_and_the_store_keeps_the_older(
    search_cache: Cache,
) -> None:
    """The measured deployment: token 5 held on replica A's path, token 6 through B, both 201."""
    argv = ["--variant", "proxy-trust-path", "--property", "acked-durable", "--pauses", "0"]
    [result] = run_checks(parse_check_args(argv), search_cache)
    trail = counterexample(result)
    assert not any(e["outcome"] == "error" for e in trail.events)  # no 504: every answer was a 2xx
    assert trail.final < trail.acknowledged


def test_the_conditional_proxy_holds_with_more_requests_and_timeouts(search_cache: Cache) -> None:
    # the 3-client tables of docs/model.md take minutes and are regenerated by hand
    for argv in (["--ops", "2"], ["--ops", "2", "--pauses", "2"]):
        results = run_checks(parse_check_args(["--variant", "proxy-conditional", *argv]), search_cache)
        assert {r.prop: r.verdict for r in results} == dict.fromkeys(
            promised("proxy-conditional"), "holds"
        ), argv
        assert all(r.report.complete for r in results)


def test_without_a_tombstone_a_held_create_recreates_the_deleted_key(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    trail = counterexample(by_key[("proxy-no-tombstone", "no-recreate")])
    delete = next(e for e in trail.events if e["kind"] == "delete" and e["outcome"] == "ok")
    recreate = _applied(trail)[-1]
    assert recreate["kind"] == "write"
    assert recreate["token"] < delete["token"]
    assert recreate["at"] > delete["at"]
    held = [e["detail"] for e in trail.events if e["client"] == recreate["client"]]
    assert any("If-None-Match: *" in d for d in held)  # its precondition held: the key had no version


def test_an_unconditional_tombstone_from_an_older_token_buries_a_newer_write(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    trail = counterexample(by_key[("proxy-blind-delete", "store-order")])
    [stale] = _below_an_earlier(_applied(trail))
    assert stale["kind"] == "delete"
    assert any(
        "tombstone, unconditional" in e["detail"] for e in trail.events if e["client"] == stale["client"]
    )
    assert any(e["kind"] == "write" and e["token"] > stale["token"] for e in _applied(trail))


def test_a_tombstone_without_its_token_lets_the_retry_after_412_recreate_the_key(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    trail = counterexample(by_key[("proxy-bare-tombstone", "no-recreate")])
    applied = _applied(trail)
    tombstone = next(e for e in applied if e["kind"] == "delete")
    recreate = applied[-1]
    assert recreate["kind"] == "write"
    assert recreate["token"] < tombstone["token"]
    # the held If-None-Match: * failed on the tombstone, and the new read found no token to refuse it by
    assert "If-None-Match: *; 412 from the store; sent PUT, If-Match" in recreate["detail"]


def test_a_write_checked_before_a_newer_fenced_read_lands_after_it_and_an_increment_is_lost(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    """The conditional proxy under the lab's workload: the fenced read raised only the gateway's mark."""
    trail = counterexample(by_key[("proxy-increments", "increments")])
    assert trail.value < trail.increments
    reads = [e for e in trail.events if e["kind"] == "read" and e["outcome"] == "ok"]
    newer = max(reads, key=lambda e: e["token"])
    older = next(e for e in _applied(trail) if e["kind"] == "write" and e["token"] < newer["token"])
    assert older["seq"] > newer["seq"]
    assert older["at"] > newer["at"]  # the older write reached the store after the newer read
    assert not any(e["outcome"] == "error" for e in trail.events)  # no timeout needed, only two in flight


def test_a_fenced_read_that_writes_its_token_at_the_store_keeps_every_increment(search_cache: Cache) -> None:
    for argv in (["--ops", "2"], ["--ops", "2", "--pauses", "2"]):
        results = run_checks(parse_check_args(["--variant", "proxy-read-raises", *argv]), search_cache)
        assert {r.prop: r.verdict for r in results} == dict.fromkeys(promised("proxy-read-raises"), "holds")
        assert all(r.report.complete for r in results)
