"""The full fault and load suite, bounded in time, on loopback (`fencegate soak`, `make soak`).

Starts a private cluster (5 Redis, ZooKeeper, PostgreSQL) under `.state/soak`,
runs the load with its faults (`load.py`), checks the history (`history.py`)
and the audit trail, then the bad-input phase (`badinput.py`), and prints
what was held, injected and tried, and what was lost or violated. The exit
code is 0 only if nothing acknowledged was lost, no invariant was violated,
no client error got a 5xx, no refused request changed storage, and the load
did what it claims: writes acknowledged, the rate under faults at least
`rate_goal` of the burst's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencegate.lab.cluster import LocalCluster
from fencegate.soak.badinput import BadInputResult, bad_input_phase
from fencegate.soak.history import SoakVerdict, check
from fencegate.soak.load import PAUSE_TTLS, SPEC, LoadResult, Soak, SoakConfig

STATE_DIR = Path(".state/soak")
log = logging.getLogger(__name__)


@dataclass
class SoakReport:
    config: SoakConfig
    load: LoadResult
    verdict: SoakVerdict
    bad: BadInputResult
    seconds: float

    @property
    def ok(self) -> bool:
        return (
            self.verdict.lost == 0
            and not self.verdict.violations
            and self.load.bench_refused == 0
            and self.load.audit.ok
            and not self.bad.server_errors
            and not self.bad.changed
            and not self.shortfalls
        )

    @property
    def shortfalls(self) -> list[str]:
        """Why the load proves less than it claims: no write acknowledged, or the rate under faults
        below `rate_goal` of the burst's. Nothing lost out of nothing written is not a pass."""
        found = []
        leased = sum(1 for c in self.load.history.calls if c.method == "PUT" and c.status in (200, 201))
        if not leased:
            found.append("load: no leased write was acknowledged")
        if not self.verdict.unleased_acked:
            found.append("load: no unleased write was acknowledged")
        ratio = self.load_ratio
        if ratio is not None and ratio < self.config.rate_goal:
            found.append(
                f"load: {self.verdict.fault_rate:.0f} req/s under faults is {ratio:.2f} of the burst's "
                f"{self.load.bench_rate:.0f} req/s, below the goal {self.config.rate_goal:.2f}"
            )
        return found

    def problems(self) -> list[str]:
        """Every reason the run fails, the load's shortfalls first (the table and --json list them)."""
        v, load, bad = self.verdict, self.load, self.bad
        return self.shortfalls + v.violations + load.audit.violations + bad.server_errors + bad.changed

    @property
    def load_ratio(self) -> float | None:
        """The rate held while the faults hit, over the unfaulted wrk burst's (goal: >= `rate_goal`)."""
        rate = self.load.bench_rate
        return self.verdict.fault_rate / rate if rate else None

    def rates(self) -> str:
        v, rate, ratio = self.verdict, self.load.bench_rate, self.load_ratio
        bench = "not measured" if rate is None else f"{rate:.0f} req/s ({self.load.bench_refused} non-2xx)"
        held = f"{v.fault_rate:.0f} req/s"
        if ratio is None:
            return f"under faults {held}; unfaulted wrk burst {bench}"
        goal = self.config.rate_goal
        return f"under faults {held}; unfaulted wrk burst {bench}; ratio {ratio:.2f}, goal {goal:.2f}"

    def json(self) -> dict[str, Any]:
        """The table's numbers for machines (`fencegate soak --json`)."""
        v, load, r = self.verdict, self.load, self.verdict.retries
        return {
            "verdict": "PASS" if self.ok else "FAIL",
            "seconds": round(self.seconds, 1),
            "config": dataclasses.asdict(self.config),
            "requests": v.requests,
            "elapsed_s": round(load.elapsed, 1),
            "rate_per_s": round(v.rate, 1),
            "fault_rate_per_s": round(v.fault_rate, 1),
            "bench_rate_per_s": None if load.bench_rate is None else round(load.bench_rate, 1),
            "bench_non_2xx": load.bench_refused,
            "fault_to_bench_ratio": None if self.load_ratio is None else round(self.load_ratio, 3),
            "goal_ratio": round(self.config.rate_goal, 3),
            "p50_ms": round(v.p50_ms, 1),
            "p99_ms": round(v.p99_ms, 1),
            "refusals": {str(s): n for s, n in sorted(v.refusals.items())},
            "errors": dict(sorted(v.errors.items())),
            "faults": [
                {"what": f.what, "start_s": round(f.start, 1), "end_s": round(f.end, 1)} for f in load.faults
            ],
            "unleased_acknowledged": v.unleased_acked,
            "retried_writes": r.writes,
            "retry_attempts": r.attempts,
            "unknown_outcomes": r.unknown,
            "applied_twice": len(r.applied_twice),
            "retry_answers_differ": len(r.answers_differ),
            "acknowledged_lost": v.lost,
            "invariant_violations": len(v.violations),
            "shortfalls": self.shortfalls,
            "violations": self.problems()[:30],
            "audit_rows": load.audit.rows,
            "bad_input_5xx": len(self.bad.server_errors),
            "refused_but_changed": len(self.bad.changed),
        }

    def table(self) -> str:
        v, cfg, load, bad = self.verdict, self.config, self.load, self.bad
        r = v.retries
        refusals = ", ".join(f"{s}: {n}" for s, n in sorted(v.refusals.items())) or "none"
        errors = ", ".join(f"{s}: {n}" for s, n in sorted(v.errors.items())) or "none"
        faults = (
            "; ".join(f"{f.what} (at {f.start:.1f} s, back at {f.end:.1f} s)" for f in load.faults) or "none"
        )
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(bad.statuses.items()))
        tried = ", ".join(f"{n} {src}" for src, n in sorted(bad.tried.items()))
        audit = load.audit
        rows = [
            ("setup", f"{cfg.clients} clients with Redlock leases on {cfg.resources} resources, "
             f"{cfg.writers} unleased writers x {cfg.in_flight} in flight, "
             "2 gateways on one PostgreSQL, tokens from ZooKeeper, loopback"),
            ("load held", f"{v.requests} requests ({len(load.history.calls)} leased) in {load.elapsed:.1f} s "
             f"= {v.rate:.1f} req/s; "
             f"p50 {v.p50_ms:.1f} ms, p99 {v.p99_ms:.1f} ms"),
            ("rates", self.rates()),
            ("refusals", refusals),
            ("errors", f"{errors}; lock attempts that failed or leases lost: {load.history.lock_failures}"),
            ("paused holders", f"{load.history.pauses} leases paused {PAUSE_TTLS} TTLs before their write"),
            ("faults injected", faults),
            ("retries", f"{r.writes} writes retried with their Idempotency-Key ({r.attempts} attempts more), "
             f"{r.unknown} still unknown at their deadline; applied twice: {len(r.applied_twice)}, "
             f"2xx answers that differ: {len(r.answers_differ)}"),
            ("unleased writes", f"{v.unleased_acked} acknowledged, each checked in storage after the run"),
            ("bad inputs tried", f"{tried}; answers {statuses}"),
            ("5xx on bad input", str(len(bad.server_errors))),
            ("refused but changed", str(len(bad.changed))),
            ("audit trail", f"{audit.rows} entries, {sum(audit.outcomes.values())} read, "
             f"{len(audit.violations)} violations"),
            ("acknowledged writes lost", str(v.lost)),
            ("invariant violations", str(len(v.violations))),
            ("verdict", "PASS" if self.ok else "FAIL"),
        ]  # fmt: skip
        width = max(len(name) for name, _ in rows)
        lines = [f"fencegate soak ({self.seconds:.0f} s in all)", "-" * 100]
        lines += [f"{name.ljust(width)} | {value}" for name, value in rows]
        lines += [f"  ! {problem}" for problem in self.problems()[:30]]
        return "\n".join(lines)


async def soak(
    config: SoakConfig, state_dir: Path, *, schemathesis_examples: int, raw_examples: int
) -> SoakReport:
    """One whole run in `state_dir` (an empty directory)."""
    started = time.monotonic()
    log.info("starting the cluster: 5 Redis, ZooKeeper, PostgreSQL, 2 gateways")
    async with LocalCluster.running_async(SPEC, state_dir / "cluster") as cluster:
        log.info("load: %d leased clients on %d resources, %d unleased writers, %g s, faults on the way",
                 config.clients, config.resources, config.writers, config.duration)  # fmt: skip
        load = await Soak(config, state_dir).run(cluster)
    log.info(
        "checking %d requests against the invariants", len(load.history.calls) + len(load.history.unleased)
    )
    verdict = check(
        load.history,
        load.finals,
        load.audited,
        load.elapsed,
        objects=load.objects,
        fault_window=load.fault_window,
    )
    log.info("bad input: schemathesis and a raw fuzzer against a fresh gateway")
    bad = await asyncio.to_thread(
        bad_input_phase, state_dir, schemathesis_examples=schemathesis_examples, raw_examples=raw_examples
    )
    return SoakReport(config, load, verdict, bad, time.monotonic() - started)
