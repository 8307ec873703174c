"""Property tests of the quorum and validity arithmetic (Redlock steps 2-3)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lockclient._quorum import DRIFT_CONSTANT, Tally, drift, quorum, tally, validity
from lockclient.lease import lock_value, token_of

nodes = st.integers(min_value=1, max_value=101)
seconds = st.floats(min_value=0.001, max_value=3600, allow_nan=False, allow_infinity=False)
factors = st.floats(min_value=0, max_value=0.5, allow_nan=False)


@given(nodes)
def test_any_two_quorums_share_a_node(n: int) -> None:
    q = quorum(n)
    assert q <= n
    assert 2 * q > n  # two disjoint sets of q nodes cannot both fit in n
    assert 2 * (q - 1) <= n  # and q is the smallest such size


@given(seconds, factors)
def test_drift_is_proportional_plus_two_ms(ttl: float, factor: float) -> None:
    assert drift(ttl, factor) == ttl * factor + DRIFT_CONSTANT
    assert drift(ttl, factor) >= 0.002


@given(seconds, seconds, factors)
def test_validity_is_ttl_minus_elapsed_minus_drift(ttl: float, elapsed: float, factor: float) -> None:
    allowance = drift(ttl, factor)
    left = validity(ttl, elapsed, allowance)
    assert left == ttl - elapsed - allowance
    if elapsed >= ttl:
        assert left <= 0  # an attempt that took the whole TTL is never granted
    if elapsed + allowance < ttl * (1 - 1e-9):
        assert left > 0
    assert left < ttl  # never more than the key itself lives


@given(seconds, seconds, seconds, factors)
def test_validity_shrinks_as_the_attempt_takes_longer(ttl: float, a: float, b: float, factor: float) -> None:
    allowance = drift(ttl, factor)
    fast, slow = sorted((a, b))
    assert validity(ttl, slow, allowance) <= validity(ttl, fast, allowance)


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50), st.floats(-10, 10, allow_nan=False))
def test_a_grant_needs_a_quorum_and_time_left(granted: int, refused: int, failed: int, left: float) -> None:
    tally = Tally(granted=granted, refused=refused, failed=failed)
    if tally.nodes == 0:
        return
    assert tally.grants(left) == (granted >= quorum(tally.nodes) and left > 0)
    # a majority refusing and a majority granting cannot both happen
    assert not (tally.has_quorum() and tally.held_elsewhere())


@given(nodes, st.data())
def test_two_clients_cannot_both_be_granted(n: int, data: st.DataObject) -> None:
    """Each master grants one client at most; split the masters any way, at most one wins."""
    first = data.draw(st.integers(0, n))
    second = data.draw(st.integers(0, n - first))
    a = Tally(granted=first, refused=second, failed=n - first - second)
    b = Tally(granted=second, refused=first, failed=n - first - second)
    assert not (a.grants(1.0) and b.grants(1.0))


@given(st.lists(st.one_of(st.booleans(), st.just(TimeoutError()), st.just(ConnectionError())), max_size=15))
def test_tally_counts_every_answer_once(outcomes: list[object]) -> None:
    counts = tally(outcomes)
    assert counts.nodes == len(outcomes)
    assert counts.granted == outcomes.count(True)
    assert counts.refused == sum(o is False for o in outcomes)


@given(st.one_of(st.none(), st.integers(min_value=1, max_value=2**63 - 1)))
def test_the_lock_value_records_its_token(token: int | None) -> None:
    value = lock_value(token)
    assert token_of(value) == token
    assert token_of(value.encode()) == token
    assert lock_value(token) != value  # fresh random bytes every time
