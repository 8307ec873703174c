"""The full fault and load suite, bounded in time, on loopback (`fencegate soak`, `make soak`).

Starts a private cluster (5 Redis, ZooKeeper, PostgreSQL) under `.state/soak`,
runs the load with its faults (`load.py`), checks the history (`history.py`)
and the audit trail, then the bad-input phase (`badinput.py`), and prints
what was held, injected and tried, and what was lost or violated. The exit
code is 0 only if nothing acknowledged was lost, no invariant was violated,
no client error got a 5xx and no refused request changed storage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from fencegate.lab.cluster import LocalCluster
from fencegate.soak.badinput import BadInputResult, bad_input_phase
from fencegate.soak.history import Verdict, check
from fencegate.soak.load import PAUSE_TTLS, SPEC, LoadResult, Soak, SoakConfig

STATE_DIR = Path(".state/soak")
log = logging.getLogger(__name__)


@dataclass
class SoakReport:
    config: SoakConfig
    load: LoadResult
    verdict: Verdict
    bad: BadInputResult
    seconds: float

    @property
    def ok(self) -> bool:
        return (
            self.verdict.lost == 0
            and not self.verdict.violations
            and self.load.audit.ok
            and not self.bad.server_errors
            and not self.bad.changed
        )

    def table(self) -> str:
        v, cfg, load, bad = self.verdict, self.config, self.load, self.bad
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
             "2 gateways on one PostgreSQL, tokens from ZooKeeper, loopback"),
            ("load held", f"{v.requests} requests in {load.elapsed:.1f} s = {v.rate:.1f} req/s; "
             f"p50 {v.p50_ms:.1f} ms, p99 {v.p99_ms:.1f} ms"),
            ("refusals", refusals),
            ("errors", f"{errors}; lock attempts that failed or leases lost: {load.history.lock_failures}"),
            ("paused holders", f"{load.history.pauses} leases paused {PAUSE_TTLS} TTLs before their write"),
            ("faults injected", faults),
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
        lines += [
            f"  ! {problem}"
            for problem in (v.violations + audit.violations + bad.server_errors + bad.changed)[:30]
        ]
        return "\n".join(lines)


async def soak(
    config: SoakConfig, state_dir: Path, *, schemathesis_examples: int, raw_examples: int
) -> SoakReport:
    """One whole run in `state_dir` (an empty directory)."""
    started = time.monotonic()
    log.info("starting the cluster: 5 Redis, ZooKeeper, PostgreSQL, 2 gateways")
    async with LocalCluster.running_async(SPEC, state_dir / "cluster") as cluster:
        log.info("load: %d clients on %d resources for %g s, faults on the way", config.clients,
                 config.resources, config.duration)  # fmt: skip
        load = await Soak(config, state_dir).run(cluster)
    log.info("checking %d requests against the invariants", len(load.history.calls))
    verdict = check(load.history, load.finals, load.audited, load.elapsed)
    log.info("bad input: schemathesis and a raw fuzzer against a fresh gateway")
    bad = await asyncio.to_thread(
        bad_input_phase, state_dir, schemathesis_examples=schemathesis_examples, raw_examples=raw_examples
    )
    return SoakReport(config, load, verdict, bad, time.monotonic() - started)
