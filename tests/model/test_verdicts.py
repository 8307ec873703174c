"""The verdicts the issue asks for, from exhaustive searches of small configurations."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from fencegate.model.cli import Cache, run_checks
from fencegate.model.runner import CheckResult
from fencegate.model.trail import EVENT_KEYS
from fencegate.model.variants import VARIANTS, promised
from tests.model.conftest import counterexample, parse_check_args

SHIPPED = ["fenced", "fence-only", "bound-resource", "proxy-conditional", "proxy-if-match"]


def test_the_shipped_designs_are_the_ones_the_exit_status_guards() -> None:
    assert [name for name, v in VARIANTS.items() if v.shipped] == SHIPPED


@pytest.mark.parametrize(("variant", "prop"), [(v, p) for v in SHIPPED for p in sorted(promised(v))])
def test_shipped_variants_verify_every_promised_property(
    by_key: dict[tuple[str, str], CheckResult], variant: str, prop: str
) -> None:
    result = by_key[(variant, prop)]
    assert result.verdict == "holds"
    assert result.report.errors == 0
    assert result.report.complete
    assert result.report.states > 0
    assert result.trail is None


def test_fence_only_keeps_grant_order_because_its_grant_is_the_token(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    assert by_key[("fence-only", "grant-order")].verdict == "holds"


def _older_after_newer(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Accepted store operations of a lease acquired before a lease the store had already served."""
    acquired = {e["lease"]: e["at"] for e in events if e["kind"] == "acquire" and e["outcome"] == "ok"}
    accepted = sorted((e for e in events if e["seq"] is not None), key=lambda e: e["seq"])
    newest = None
    stale = []
    for event in accepted:
        started = acquired[event["lease"]]
        if newest is not None and started < newest:
            stale.append(event)
        newest = started if newest is None else max(newest, started)
    return stale


def test_redis_only_interleaving_trail_shows_an_older_lease_accepted_after_a_newer(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    events = counterexample(by_key[("redis-only", "interleave")]).events
    assert all(tuple(e) == EVENT_KEYS for e in events)
    stale = _older_after_newer(events)
    assert stale, events
    # the stale request left its client while its lease was live and landed after it expired
    lease = stale[-1]["lease"]
    expired_at = min(e["at"] for e in events if e["kind"] == "expire" and e["lease"] == lease)
    assert stale[-1]["at"] > expired_at


def test_redis_only_lost_update_trail_ends_with_fewer_increments_than_acknowledged(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    trail = counterexample(by_key[("redis-only", "lost-update")])
    acked = [e for e in trail.events if e["kind"] == "write" and e["outcome"] == "ok"]
    assert len(acked) == trail.acknowledged == 2
    assert trail.final < len(acked)
    # both writes wrote the same value: each read the counter before the other wrote
    assert len({e["value"] for e in acked}) == 1


def test_mark_never_decreases_where_the_fence_is_one_transaction(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    assert {v: r.verdict for (v, p), r in by_key.items() if p == "mark"} == {
        "redis-only": "holds",  # no fence, no mark: vacuous
        "fenced": "holds",
        "fenced-late-clock": "holds",
        "split-fence": "violated",
        "unfenced-reads": "holds",
        "fence-only": "holds",
        "token-after": "holds",
        "token-regress": "holds",
        "any-resource": "holds",  # each resource's mark rises; the key is fenced by the wrong one
        "bound-resource": "holds",
        "bound-on-create": "holds",
        "bound-until-delete": "holds",
    }


def test_without_fenced_reads_a_delayed_stale_write_loses_an_update(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    trail = counterexample(by_key[("unfenced-reads", "lost-update")])
    reads = [e for e in trail.events if e["kind"] == "read"]
    assert all(e["token"] is None for e in reads)  # a GET without Fencing-Token
    assert trail.final < trail.acknowledged


def test_split_fence_trail_shows_a_lower_token_accepted_after_a_higher(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    result = by_key[("split-fence", "mark")]
    assert result.trail is not None
    tokens = [e["token"] for e in result.trail.accepted()]
    assert any(later < earlier for earlier, later in itertools.pairwise(tokens)), tokens


def test_token_after_keeps_the_fence_but_a_pause_alone_breaks_grant_order(search_cache: Cache) -> None:
    argv = ["--variant", "fenced,token-after", "--node-faults", "0", "--pauses", "2"]
    results = run_checks(parse_check_args([*argv, "--property", "grant-order"]), search_cache)
    verdicts = {r.variant: r for r in results}
    assert verdicts["fenced"].verdict == "holds"
    events = counterexample(verdicts["token-after"]).events
    assert not any(e["kind"] == "fault" and e["client"] == "lab" for e in events)
    # the zombie, paused past its TTL, was served after the lease granted later
    stale = _older_after_newer(events)
    assert stale
    zombie = stale[0]["lease"]
    assert any(e["kind"] == "expire" and e["lease"] == zombie for e in events)


def test_a_token_source_that_goes_back_lets_two_leases_share_a_token_and_loses_an_update(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    assert by_key[("token-regress", "mark")].verdict == "holds"  # the fence itself stays one transaction
    trail = counterexample(by_key[("token-regress", "lost-update")])
    assert trail.final < trail.acknowledged
    assert any(e["client"] == "lab" and "token source restarted" in e["detail"] for e in trail.events)
    accepted = trail.accepted()
    # the zombie and the new holder passed the fence with one token: equal to the mark is accepted
    assert len({e["lease"] for e in accepted}) == 2
    assert len({e["token"] for e in accepted}) == 1


def test_interleave_catches_a_b_a_between_two_leases_that_share_a_token(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    leases = [e["lease"] for e in counterexample(by_key[("token-regress", "interleave")]).accepted()]
    runs = [lease for i, lease in enumerate(leases) if i == 0 or leases[i - 1] != lease]
    assert len(runs) > len(set(runs)), leases  # a lease served again after another one's request


@pytest.mark.parametrize("nodes", ["1", "5"])
def test_fenced_counter_loses_no_update_on_one_and_five_nodes(nodes: str, search_cache: Cache) -> None:
    argv = ["--variant", "fenced", "--property", "lost-update", "--nodes", nodes]
    [result] = run_checks(parse_check_args(argv), search_cache)
    assert result.verdict == "holds"
    assert result.report.complete
    assert result.sizes.nodes == int(nodes)
