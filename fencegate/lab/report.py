"""The lab's results for people and machines: the terminal table and the JSON document.

One `RunResult` per (scenario, mode, lock, store, token source, seed): its history
and the checker's verdict. `table()` prints one row per run, `summary()` one
row per (scenario, mode, lock, token source) over all seeds, with how many seeds were unsafe (lost
updates or interleaved leases: the safety verdict; the other columns explain
it). `token_trail()` tells a token-regress run's tokens and what the fence
let through; `predicted_line()` how many verdicts came out as the seed
documents predict. `to_json()` carries the same numbers, each run's predicted
verdict and, unless asked not to, every history. The HTML report with the timelines lives in `lab.timeline`.
The table and the summary gain a `store` column when some run kept its
counter elsewhere than behind the gateway (a user table: `sql`); a
comparison on the gateway alone reads as it always did.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fencegate.lab.checker import Verdict, check, lease_spans
from fencegate.lab.history import History
from fencegate.lab.predictions import GATEWAY, expected_safe
from fencegate.tables import grid

COLUMNS = (
    ("ops", "ops"),
    ("acknowledged", "acked"),
    ("lost_updates", "lost"),
    ("interleaved_leases", "interleaved"),
    ("refused", "refused"),
    ("zombie_requests", "zombies"),
    ("overlaps", "overlaps"),
)
JSON_VERSION = 1


@dataclass(frozen=True)
class RunResult:
    """One run: what was recorded and what the checker found."""

    history: History
    verdict: Verdict

    @classmethod
    def of(cls, history: History) -> RunResult:
        return cls(history, check(history))


def _with_store(runs: Sequence[RunResult]) -> bool:
    return any(run.history.meta.store != GATEWAY for run in runs)


def table(runs: Sequence[RunResult]) -> str:
    """One row per run: scenario, mode, lock, (store,) token source, seed, the checker's numbers, verdict."""
    stores = _with_store(runs)
    header = ["scenario", "mode", "lock", *(["store"] if stores else []), "tokens", "seed"]
    header += [*(label for _, label in COLUMNS), "verdict"]
    rows = [
        [
            run.history.meta.scenario,
            run.history.meta.mode,
            run.history.meta.lock,
            *([run.history.meta.store] if stores else []),
            run.history.meta.tokens or "-",
            str(run.history.meta.seed),
            *(str(getattr(run.verdict, field)) for field, _ in COLUMNS),
            "SAFE" if run.verdict.safe else "UNSAFE",
        ]
        for run in runs
    ]
    return (
        grid(header, rows, right=range(len(header) - len(COLUMNS) - 2, len(header))) if rows else "(no runs)"
    )


SUMMARY_HEADER = ("scenario", "mode", "lock", "tokens", *(label for _, label in COLUMNS), "unsafe seeds")


def summary_header(runs: Sequence[RunResult]) -> tuple[str, ...]:
    """`SUMMARY_HEADER`, with a store column after the lock when some run was not on the gateway."""
    return (*SUMMARY_HEADER[:3], "store", *SUMMARY_HEADER[3:]) if _with_store(runs) else SUMMARY_HEADER


def summary_rows(runs: Sequence[RunResult]) -> list[list[str]]:
    """Per (scenario, mode, lock, store, tokens): the numbers summed over seeds, and unsafe seeds."""
    stores = _with_store(runs)
    groups: dict[tuple[str, ...], list[RunResult]] = {}
    for run in runs:
        meta = run.history.meta
        store = [meta.store] if stores else []
        groups.setdefault((meta.scenario, meta.mode, meta.lock, *store, meta.tokens or "-"), []).append(run)
    rows = []
    for key, members in groups.items():
        sums = [str(sum(getattr(m.verdict, field) for m in members)) for field, _ in COLUMNS]
        unsafe = sum(1 for m in members if not m.verdict.safe)
        rows.append([*key, *sums, f"{unsafe}/{len(members)}"])
    return rows


def summary(runs: Sequence[RunResult]) -> str:
    """`summary_rows` as aligned text under `summary_header`."""
    rows, header = summary_rows(runs), summary_header(runs)
    return (
        grid(header, rows, right=range(len(header) - len(COLUMNS) - 1, len(header))) if rows else "(no runs)"
    )


def as_predicted(run: RunResult) -> bool:
    """The run's verdict is the one the seed documents predict (`lab.predictions`)."""
    return run.verdict.safe == expected_safe(run.history.meta)


def predicted_line(runs: Sequence[RunResult]) -> str:
    """How many verdicts came out as predicted: the line under the terminal's table and atop the report."""
    return f"{sum(1 for run in runs if as_predicted(run))}/{len(runs)} verdicts as the seed documents predict"


def token_trail(run: RunResult) -> str:
    """The tokens in the order their leases began, where they went back, and what the store did next.

    For token-regress: a token source that goes back hands the next holder a
    token the fence cannot tell from the old one, so the old holder's write is
    accepted; one that does not go back gets it refused.
    """
    spans = sorted(lease_spans(run.history.events).values(), key=lambda span: span.start)
    drawn = [f"{span.lease}={span.token}" for span in spans if span.token is not None]
    back = [
        f"{later.lease} drew {later.token} after {earlier.lease} drew {earlier.token}"
        for earlier, later in itertools.pairwise(spans)
        if earlier.token is not None and later.token is not None and later.token <= earlier.token
    ]
    writes = [
        f"{e.lease} (token {e.token}) {'accepted' if e.outcome == 'ok' else e.outcome}"
        + (" OUT OF TURN" if e.seq is not None and e.seq in run.verdict.interleaved else "")
        for e in run.history.events
        if e.kind == "write" and e.outcome in ("ok", "refused")
    ]
    meta = run.history.meta
    return "\n".join(
        [
            f"{meta.scenario} ({meta.tokens or 'no'} tokens, seed {meta.seed}):",
            f"  tokens by lease start: {', '.join(drawn) or '-'}",
            f"  went back: {'; '.join(back) if back else 'never'}",
            f"  writes at the store: {', '.join(writes) or '-'}",
        ]
    )


def to_json(runs: Sequence[RunResult], *, histories: bool = True) -> dict[str, Any]:
    """The same numbers as the table, per run, and each run's history unless `histories=False`."""
    out = []
    for run in runs:
        verdict = asdict(run.verdict)
        verdict["safe"] = run.verdict.safe
        entry: dict[str, Any] = {
            "meta": asdict(run.history.meta),
            "verdict": verdict,
            "expected_safe": expected_safe(run.history.meta),
        }
        if histories:
            entry["history"] = {
                "initial": run.history.initial,
                "final": run.history.final,
                "events": [e.to_json() for e in run.history.events],
            }
        out.append(entry)
    return {"fencegate_lab": JSON_VERSION, "runs": out}


__all__ = [
    "COLUMNS",
    "SUMMARY_HEADER",
    "RunResult",
    "as_predicted",
    "predicted_line",
    "summary",
    "summary_header",
    "summary_rows",
    "table",
    "to_json",
    "token_trail",
]
