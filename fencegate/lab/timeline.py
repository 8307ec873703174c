"""The HTML report: a summary table, then one timeline per run (`lab.timeline_svg`).

The file is self-contained (inline SVG and CSS, no script, no network) so it
can be mailed or opened offline. Elements carry classes and data attributes
(`lane`, `lease`, `write`, `data-outcome`, ...) that tests and readers can query.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from fencegate.lab.predictions import GATEWAY, REGRESS
from fencegate.lab.report import (
    COLUMNS,
    RunResult,
    as_predicted,
    predicted_line,
    summary_header,
    summary_rows,
    token_trail,
)
from fencegate.lab.timeline_svg import CSS, LEFT, RIGHT, SQUEEZE, WIDTH, Scale, render_run


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _summary(runs: Sequence[RunResult], *, predicted: bool) -> str:
    head = "".join(f"<th>{label}</th>" for _, label in COLUMNS)
    rows = []
    for index, run in enumerate(runs):
        meta, verdict = run.history.meta, run.verdict
        cells = "".join(f"<td>{getattr(verdict, field)}</td>" for field, _ in COLUMNS)
        state = '<td class="safe">SAFE</td>' if verdict.safe else '<td class="unsafe">UNSAFE</td>'
        if predicted:
            state += (
                "<td>as predicted</td>" if as_predicted(run) else '<td class="missed">NOT as predicted</td>'
            )
        tokens = f" / {meta.tokens} tokens" if meta.tokens else ""
        store = "" if meta.store == GATEWAY else f" / {meta.store} store"
        name = f"{meta.scenario} / {meta.mode} / {meta.lock}{store}{tokens} / seed {meta.seed}"
        rows.append(f'<tr><td class="name"><a href="#run-{index}">{_e(name)}</a></td>{cells}{state}</tr>')
    more = "<th>prediction</th>" if predicted else ""
    header = f'<tr><th class="name">run</th>{head}<th>verdict</th>{more}</tr>'
    return f'<table class="summary">{header}{"".join(rows)}</table>'


def _cells(tag: str, values: Sequence[str], names: int) -> str:
    """Table cells; the first `names` are names (left-aligned), the rest numbers."""
    return "".join(
        f'<{tag} class="name">{_e(value)}</{tag}>' if i < names else f"<{tag}>{_e(value)}</{tag}>"
        for i, value in enumerate(values)
    )


def _over_seeds(runs: Sequence[RunResult]) -> str:
    """The terminal's summary over seeds, as a table: only when the runs span several seeds."""
    if len({run.history.meta.seed for run in runs}) < 2:
        return ""
    header = summary_header(runs)
    names = len(header) - len(COLUMNS) - 1
    rows = "".join(f"<tr>{_cells('td', row, names)}</tr>" for row in summary_rows(runs))
    head = _cells("th", header, names)
    return f'<h2>Over seeds</h2><table class="summary seeds"><tr>{head}</tr>{rows}</table>'


def render_html(runs: Sequence[RunResult], *, title: str = "fencegate lab", predicted: bool = False) -> str:
    """The whole self-contained report; `predicted` adds how each verdict compares with the seed
    documents' prediction (for the lab's own runs; the model's counterexamples have none)."""
    sections = []
    for index, run in enumerate(runs):
        meta = run.history.meta
        tokens = f", tokens from {meta.tokens}" if meta.tokens else ""
        store = "" if meta.store == GATEWAY else f", counter in the {meta.store} store"
        trail = f'<pre class="trail">{_e(token_trail(run))}</pre>' if meta.scenario == REGRESS else ""
        sections.append(
            f'<section id="run-{index}"><h2>{_e(meta.scenario)}: {_e(meta.mode)}, lock {_e(meta.lock)}, '
            f"seed {meta.seed}{_e(tokens)}{_e(store)}</h2>{trail}{render_run(run, index)}</section>"
        )
    legend = (
        '<p class="legend"><span>blue bar: lease while valid (dashed outline: a token, no lock)</span>'
        "<span>red dashes: used after expiry</span>"
        "<span>grey: paused</span><span>purple line: fault</span><span>green: write accepted</span>"
        "<span>red: refused</span><span>amber: accepted out of turn (interleaved)</span>"
        "<span>pale band: idle time drawn short, labelled with its real length</span></p>"
    )
    count = ""
    if predicted:
        missed = "" if all(as_predicted(run) for run in runs) else ' class="missed"'
        count = f"<p{missed}>{_e(predicted_line(runs))}</p>"
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>{count}"
        f"{_summary(runs, predicted=predicted)}{_over_seeds(runs)}{legend}"
        f"{''.join(sections)}</body></html>"
    )


def write_svg(run: RunResult, path: Path | str) -> Path:
    """One run's timeline as a standalone .svg file (for docs); its directory is made if missing."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_run(run, 0, standalone=True), encoding="utf-8")
    return target


def write_html(
    runs: Sequence[RunResult], path: Path | str, *, title: str = "fencegate lab", predicted: bool = False
) -> Path:
    """The report of `runs` as one self-contained HTML file; its directory is made if missing."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(runs, title=title, predicted=predicted), encoding="utf-8")
    return target


# the figure's names stay importable from here, where they were first
__all__ = [
    "LEFT",
    "RIGHT",
    "SQUEEZE",
    "WIDTH",
    "Scale",
    "render_html",
    "render_run",
    "write_html",
    "write_svg",
]
