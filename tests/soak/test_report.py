"""The soak's verdict: nothing lost out of nothing written, or a load that fell below its rate goal
under faults, is not a pass. Reports built from histories written by hand."""

from __future__ import annotations

from collections import Counter

from fencegate.soak.badinput import BadInputResult
from fencegate.soak.faults import Fault
from fencegate.soak.history import Call, Final, SoakHistory, check
from fencegate.soak.load import LoadResult, SoakConfig
from fencegate.soak.run import SoakReport
from storage.verify import AuditReport


def put(key: str, status: int, at: float, *, version: int | None = None) -> Call:
    body = f"1 c0 {key}".encode()
    return Call(0, 0, "PUT", key, 1, body, at, at + 0.01, status, version, f"c0-{key}-1")


def report(calls: list[Call], unleased: list[Call], *, bench_rate: float) -> SoakReport:
    """Faults from 0 s to 10 s; the calls' answers are all the load there was."""
    history = SoakHistory(calls=calls, unleased=unleased)
    acked = [c for c in calls if c.status == 201]
    finals = {c.key: Final(c.body, c.version, c.token) for c in acked}
    objects = {c.key: (c.body, c.version or 0) for c in unleased if c.status == 201}
    audited = Counter((c.key, c.token) for c in acked + unleased if c.status == 201)
    verdict = check(history, finals, audited, 10.0, objects=objects, fault_window=(0.0, 10.0))
    load = LoadResult(
        history, finals, objects, audited, AuditReport(), bench_rate, 0, [Fault("kill -9", 0.0, 10.0)], 10.0
    )
    return SoakReport(SoakConfig(), load, verdict, BadInputResult(), 10.0)


def test_a_clean_run_at_its_rate_passes() -> None:
    run = report(
        [put("soak-r0", 201, 1.0, version=1)], [put("soak-w0-k1", 201, 2.0, version=1)], bench_rate=0.5
    )
    assert run.ok, run.problems()
    assert run.json()["verdict"] == "PASS"


def test_a_run_below_a_third_of_the_burst_rate_fails_and_says_so() -> None:
    calls = [put(f"soak-w0-k{i}", 201, float(i), version=1) for i in range(10)]  # 1 req/s under faults
    run = report([put("soak-r0", 201, 0.5, version=1)], calls, bench_rate=100.0)
    assert run.verdict.lost == 0
    assert run.verdict.violations == []
    assert not run.ok
    assert run.json()["verdict"] == "FAIL"
    assert any("below the goal 0.33" in p for p in run.json()["shortfalls"])
    assert "below the goal 0.33" in run.table()


def test_a_run_where_no_write_was_acknowledged_fails() -> None:
    refused = [put(f"soak-w0-k{i}", 409, float(i)) for i in range(10)]
    run = report([put("soak-r0", 409, 0.5)], refused, bench_rate=2.0)
    assert run.verdict.lost == 0
    assert run.verdict.violations == []
    assert not run.ok
    assert run.shortfalls == [
        "load: no leased write was acknowledged",
        "load: no unleased write was acknowledged",
    ]


def test_503s_under_faults_are_not_load_held() -> None:
    """A gateway that answers 503 fast while the faults hit holds no load, however many it sends."""
    failed = [put(f"soak-w0-k{i}", 503, i / 100) for i in range(900)]
    run = report([put("soak-r0", 201, 0.5, version=1)], [*failed, put("soak-w0-k9999", 201, 9.0, version=1)],
                 bench_rate=10.0)  # fmt: skip
    assert run.verdict.fault_rate == 0.2
    assert not run.ok
