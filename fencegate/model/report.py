"""Verdicts as a terminal table, a Markdown table (for docs/model.md) and JSON.

The Markdown table holds only what a rerun reproduces exactly (verdicts,
states, depth) so the doc can be regenerated and compared; time and memory,
which vary run to run, appear in the terminal table and the JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from fencegate import tables
from fencegate.model.runner import CheckResult
from fencegate.model.trail import Trail
from fencegate.model.variants import PROPERTIES, PROXY_MODEL, VARIANTS, promised


def variant_verdict(results: Sequence[CheckResult]) -> str:
    """`unsafe` if a promised property is violated; `safe` only if every promised one holds."""
    searched = [r for r in results if r.promised]
    if any(r.verdict == "violated" for r in searched):
        return "unsafe"
    if any(r.verdict == "incomplete" for r in searched):
        return "incomplete"
    if not results or {r.prop for r in searched} != promised(results[0].variant):
        return "partial"
    return "safe"


def by_variant(results: Sequence[CheckResult]) -> dict[str, list[CheckResult]]:
    grouped: dict[str, list[CheckResult]] = {}
    for result in results:
        grouped.setdefault(result.variant, []).append(result)
    return grouped


def text_table(results: Sequence[CheckResult]) -> str:
    header = ("variant", "property", "verdict", "states", "transitions", "depth", "memory MB", "time s")
    rows = [header]
    for r in results:
        rows.append(
            (
                r.variant,
                r.prop + ("" if r.promised else " *"),
                r.verdict,
                f"{r.report.states:,}",
                f"{r.report.transitions:,}",
                str(r.report.depth),
                f"{r.report.memory_mb:.0f}",
                f"{r.search_seconds:.2f}",
            )
        )
    lines = [tables.grid(header, rows[1:], right=range(3, len(header)))]
    if results:
        lines.append("")
        for model, group in by_model(results).items():
            lines.append(f"sizes ({model}): {group[0].sizes.label(model)}")
        lines.append("(* not promised by fencing: explains the verdict)")
        for variant, group in by_variant(results).items():
            lines.append(f"{variant}: {variant_verdict(group)}")
            for r in group:
                if r.verdict != "holds":
                    lines.append(f"  {r.prop}: {r.report.first_error or r.report.limit}")
    return "\n".join(lines)


def by_model(results: Sequence[CheckResult]) -> dict[str, list[CheckResult]]:
    grouped: dict[str, list[CheckResult]] = {}
    for result in results:
        grouped.setdefault(VARIANTS[result.variant].model, []).append(result)
    return grouped


def markdown_table(results: Sequence[CheckResult]) -> str:
    """One table per model (they have properties of their own), each as `_model_table` draws it."""
    return "\n\n".join(_model_table(model, group) for model, group in by_model(results).items())


def _model_table(model: str, results: Sequence[CheckResult]) -> str:
    """One row per variant, one column per property; cells: verdict, states stored, depth."""
    props = [p for p in PROPERTIES if any(r.prop == p for r in results)]
    head = ["variant", *(_title(p) for p in props), "verdict"]
    rows = []
    for variant, group in by_variant(results).items():
        cells = {r.prop: _cell(r) for r in group}
        rows.append(
            [f"`{variant}`", *(cells.get(p, "not run") for p in props), f"**{variant_verdict(group)}**"]
        )
    lines = [tables.markdown(head, rows)]
    if results:
        lines.append("")
        lines.append(f"Sizes: {results[0].sizes.label(model)}. Cells: verdict, states stored, depth reached.")
    return "\n".join(lines)


def trail_tables(results: Sequence[CheckResult], *, markdown: bool) -> str:
    """Each counterexample as a timeline table, one row per event, in step order."""
    blocks = []
    for r in results:
        if r.trail is None:
            continue
        head = ("step", "client", "kind", "lease", "token", "outcome", "value", "seq", "detail")
        rows = [
            (
                f"{e['at']:g}",
                e["client"],
                e["kind"],
                e["lease"] or "",
                _opt(e["token"]),
                e["outcome"],
                _opt(e["value"]),
                _opt(e["seq"]),
                e["detail"],
            )
            for e in r.trail.events
        ]
        ending = _ending(r.variant, r.trail)
        if markdown:
            blocks.append(f"**{r.variant} / {r.prop}** ({ending}):\n\n" + tables.markdown(head, rows))
        else:
            blocks.append(f"{r.variant} / {r.prop}: {ending}\n" + tables.grid(head, rows, indent="  "))
    return "\n\n".join(blocks)


def as_json(results: Sequence[CheckResult]) -> dict[str, Any]:
    return {
        "sizes": asdict(results[0].sizes) if results else None,
        "verdicts": {v: variant_verdict(group) for v, group in by_variant(results).items()},
        "results": [
            {
                "variant": r.variant,
                "property": r.prop,
                "promised": r.promised,
                "verdict": r.verdict,
                "build_seconds": round(r.build_seconds, 3),
                "search_seconds": round(r.search_seconds, 3),
                **asdict(r.report),
                "trail": None
                if r.trail is None
                else {
                    "final": r.trail.final,
                    "acknowledged": r.trail.acknowledged,
                    "assertion": r.trail.assertion,
                    "steps": r.trail.steps,
                    "events": r.trail.events,
                },
            }
            for r in results
        ],
    }


def history_lines(result: CheckResult) -> list[dict[str, Any]]:
    """The counterexample as a lab history file: a header line, then one line per event.

    The lab's workload never deletes, and its format has no delete: a DELETE
    the gateway served becomes a mark on its client's lane (a `fault` whose
    detail tells the outcome and the seq). The lab's checker, which counts
    increments, still counts right: the model deletes only a counter its
    client read as 0, so a DELETE removes increments only when a stale write
    slipped in between, and then the model and the lab both count them lost.
    Its order check (interleave) sees the reads and writes only.
    """
    if result.trail is None:
        return []
    variant = VARIANTS[result.variant]
    header = {
        "history": 1,
        "meta": {
            "scenario": f"model:{result.prop}",
            "mode": result.variant,
            "lock": "redlock" if variant.lock else "none",
            "seed": 0,
            "tokens": "counter" if variant.fence else None,
            "clients": result.sizes.clients,
        },
        # the counter the store ends with: proxy.pml keeps it apart from the token behind the store's state
        "final": result.trail.value if variant.model == PROXY_MODEL else result.trail.final,
        "initial": 0,
    }
    events = [e for e in result.trail.events if e["kind"] != "delete" or e["outcome"] != "sent"]
    return [header, *(_lab_event(e) for e in events)]


def _lab_event(event: dict[str, Any]) -> dict[str, Any]:
    """A model event as the lab's format holds it: a served DELETE becomes a mark on its client's lane."""
    if event["kind"] != "delete":
        return event
    if event["outcome"] == "ok":
        applied = event["seq"] is not None  # proxy.pml: a DELETE of a key with no version sends nothing
        what = f"DELETE accepted, seq {event['seq']}" if applied else "DELETE answered, none applied"
    else:
        what = "DELETE refused" if event["outcome"] == "refused" else "DELETE unanswered (outcome unknown)"
    detail = "; ".join(d for d in (what, event["detail"]) if d)
    return {**event, "kind": "fault", "outcome": "ok", "seq": None, "detail": detail}


def _ending(variant: str, trail: Trail) -> str:
    """How the trail ends: the counter, or (proxy.pml) the token of the request behind the store's state."""
    if VARIANTS[variant].model == PROXY_MODEL:
        return (
            f"the store's state made by token {trail.final}, highest token answered 2xx "
            f"{trail.acknowledged}; counter {trail.value}, increments answered 2xx {trail.increments}"
        )
    return f"final counter {trail.final}, acknowledged increments {trail.acknowledged}"


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


def _title(prop: str) -> str:
    return prop if PROPERTIES[prop].promised else f"{prop} (not promised)"


def _cell(r: CheckResult) -> str:
    word = {"holds": "holds", "violated": "**violated**", "incomplete": "incomplete"}[r.verdict]
    return f"{word} · {r.report.states:,} · {r.report.depth}"


__all__ = [
    "as_json",
    "by_model",
    "by_variant",
    "history_lines",
    "markdown_table",
    "text_table",
    "trail_tables",
    "variant_verdict",
]
