"""The HTML report: one timeline per run, drawn as Kleppmann's figure.

A lane per client shows its lease spans (solid while valid, dashed once the
lease expired while the client still acted on it), its pauses and the faults
the lab injected, each read as a tick and each write as a mark: green when the
store accepted it, red when it was refused, amber when accepted out of turn
(an interleaved request), grey on a transport error; the token is written
beside it. A storage lane below shows the store's acceptance order. Long
idle stretches (a TTL running out, a pause) are drawn short and labelled with
their real length, so the milliseconds of work stay readable. The file
is self-contained (inline SVG and CSS, no script, no network) so it can be
mailed or opened offline. Elements carry classes and data attributes
(`lane`, `lease`, `write`, `data-outcome`, ...) that tests and readers can query.
"""

from __future__ import annotations

import bisect
import html
import itertools
import math
from collections.abc import Sequence
from pathlib import Path

from fencegate.lab.checker import LeaseSpan, lease_spans
from fencegate.lab.history import Event
from fencegate.lab.report import COLUMNS, RunResult

WIDTH = 1100
LEFT = 110  # room for lane labels
RIGHT = 70  # room for the last write's label
LANE = 56
TOP = 30
SQUEEZE = 0.06  # an idle gap longer than this fraction of the run is drawn this wide, as a break

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d232a; background: #fff; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin: 28px 0 4px; }
table.summary { border-collapse: collapse; margin: 8px 0 16px; }
table.summary th, table.summary td { border: 1px solid #ccd3da; padding: 3px 8px; text-align: right; }
table.summary td.name, table.summary th.name { text-align: left; }
.unsafe { color: #b42318; font-weight: 600; } .safe { color: #067647; font-weight: 600; }
svg { background: #fafbfc; border: 1px solid #e3e8ee; }
.axis { stroke: #c3cbd3; } .label { font-size: 13px; fill: #1d232a; }
.lease rect { fill: #cfe3fb; stroke: #4a86c5; } .lease text { font-size: 11px; fill: #24507d; }
.epoch rect { fill: #eef4fb; stroke-dasharray: 3 3; } .tick { font-size: 10px; fill: #66717d; }
.expired { stroke: #b42318; stroke-width: 2; stroke-dasharray: 5 4; }
.pause { fill: #9aa5b1; opacity: .45; } .fault { stroke: #7a2e9e; stroke-width: 2; }
.fault-label { font-size: 11px; fill: #7a2e9e; }
.read { stroke: #4a5562; stroke-width: 2; }
.write circle { stroke: #1d232a; stroke-width: 1; } .write text { font-size: 11px; }
.accepted circle { fill: #12b76a; } .refused circle { fill: #f04438; }
.interleaved circle { fill: #f79009; } .error circle { fill: #98a2b3; }
.legend span { margin-right: 14px; }
.break rect { fill: #eef1f4; opacity: .7; } .break text { font-size: 10px; fill: #66717d; }
"""


class Scale:
    """Time to x, with long idle stretches squeezed so that the bursts of work stay readable.

    A run is mostly waiting (for a TTL, a pause, a delayed restart) around a
    few milliseconds of work. A gap between consecutive events longer than
    `SQUEEZE` of the run is drawn `SQUEEZE` wide and marked as a break with
    its real length; everything else is linear.
    """

    def __init__(self, times: Sequence[float]) -> None:
        points = sorted(set(times))
        self.start, self.end = points[0], points[-1]
        cap = max(self.end - self.start, 1e-6) * SQUEEZE
        self._knots: list[tuple[float, float]] = [(points[0], 0.0)]
        self.breaks: list[tuple[float, float]] = []
        for before, after in itertools.pairwise(points):
            gap = after - before
            if gap > cap:
                self.breaks.append((before, after))
            self._knots.append((after, self._knots[-1][1] + min(gap, cap)))
        self._drawn = max(self._knots[-1][1], 1e-9)
        self._times = [t for t, _ in self._knots]

    def __call__(self, at: float) -> float:
        index = bisect.bisect_right(self._times, at)
        if index == 0:
            drawn = 0.0
        elif index == len(self._knots):
            drawn = self._knots[-1][1]
        else:
            (t0, d0), (t1, d1) = self._knots[index - 1], self._knots[index]
            drawn = d0 + (at - t0) / (t1 - t0) * (d1 - d0)
        return LEFT + drawn / self._drawn * (WIDTH - LEFT - RIGHT)

    def squeezed(self, at: float) -> bool:
        return any(t0 < at < t1 for t0, t1 in self.breaks)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def render_run(run: RunResult, index: int, *, standalone: bool = False) -> str:
    """The SVG figure of one run; `standalone` adds the namespace and the style (an .svg file)."""
    events = run.history.events
    clients = sorted({e.client for e in events if e.client != "lab"})
    if not events:
        return "<p>(no events)</p>"
    spans = lease_spans(events)
    x = Scale([e.at for e in events])
    interleaved = set(run.verdict.interleaved)
    height = TOP + LANE * (len(clients) + 1) + 36
    head = f'xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" ' if standalone else ""
    parts = [f'<svg class="timeline" data-run="{index}" {head}width="{WIDTH}" height="{height}" role="img">']
    if standalone:
        parts.append(f"<style>svg {{ font: 14px system-ui, sans-serif; }} {CSS}</style>")
    parts.extend(_breaks(TOP, TOP + LANE * (len(clients) + 1), x))  # under the lanes
    lanes = {client: TOP + LANE * i for i, client in enumerate(clients)}
    for client, y in lanes.items():
        parts.append(f'<g class="lane" data-client="{_e(client)}">')
        parts.append(f'<text class="label" x="8" y="{y + 30}">{_e(client)}</text>')
        parts.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y + 44}" y2="{y + 44}"/>')
        lane_events = [e for e in events if e.client == client]
        parts.extend(_leases(client, y, lane_events, spans, x))
        parts.extend(_pauses(y, lane_events, x))
        parts.extend(_marks(y, lane_events, interleaved, x))
        parts.append("</g>")
    parts.extend(_store_lane(TOP + LANE * len(clients), events, interleaved, x))
    parts.extend(_time_axis(TOP + LANE * (len(clients) + 1) + 8, x))
    parts.append("</svg>")
    return "".join(parts)


def _time_axis(y: float, x: Scale) -> list[str]:
    """Seconds since the run's first event at round steps; none inside a squeezed gap."""
    span = max(x.end - x.start, 1e-6)
    step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100) if span / s <= 12)
    out = ['<g class="time-axis">']
    for n in range(int(span / step) + 1):
        at = x.start + n * step
        if x.squeezed(at):
            continue
        px = x(at)
        out.append(f'<line class="axis" x1="{px:.1f}" x2="{px:.1f}" y1="{y - 4}" y2="{y}"/>')
        out.append(f'<text class="tick" x="{px:.1f}" y="{y + 12}" text-anchor="middle">{n * step:g}s</text>')
    out.append("</g>")
    return out


def _breaks(top: float, bottom: float, x: Scale) -> list[str]:
    """A band where idle time was squeezed, labelled with how long it really was."""
    out = []
    for t0, t1 in x.breaks:
        x0, x1 = x(t0), x(t1)
        mid = (x0 + x1) / 2
        out.append(
            f'<g class="break"><rect x="{x0 + 4:.1f}" y="{top}" width="{max(x1 - x0 - 8, 1):.1f}" '
            f'height="{bottom - top}"/><text x="{mid:.1f}" y="{bottom + 4}" text-anchor="middle">'
            f"+{t1 - t0:.2f}s</text></g>"
        )
    return out


def _leases(client: str, y: float, lane: Sequence[Event], spans: dict[str, LeaseSpan], x: Scale) -> list[str]:
    out = []
    last_of: dict[str, float] = {}
    for event in lane:
        if event.lease is not None:
            last_of[event.lease] = event.at
    for name, span in spans.items():
        if span.client != client:
            continue
        valid_to = span.end if not math.isinf(span.end) else last_of.get(name, span.start)
        x1, x2 = x(span.start), x(valid_to)
        token = "" if span.token is None else f" token {span.token}"
        kind = "lease epoch" if math.isinf(span.expires) else "lease"  # fence-only: a token, no validity
        out.append(f'<g class="{kind}" data-lease="{_e(name)}" data-token="{_e(span.token)}">')
        out.append(f"<title>{_e(name)}{_e(token)}</title>")
        out.append(f'<rect x="{x1:.1f}" y="{y + 8}" width="{max(x2 - x1, 2):.1f}" height="18" rx="3"/>')
        out.append(f'<text x="{x1 + 3:.1f}" y="{y + 21}">{_e(name)}{_e(token)}</text>')
        if last_of.get(name, span.start) > span.expires:  # acted on after its validity ended
            xe = x(last_of[name])
            out.append(f'<line class="expired" x1="{x2:.1f}" x2="{xe:.1f}" y1="{y + 17}" y2="{y + 17}"/>')
        out.append("</g>")
    return out


def _pauses(y: float, lane: Sequence[Event], x: Scale) -> list[str]:
    out = []
    paused_at: float | None = None
    for event in lane:
        if event.kind == "pause":
            paused_at = event.at
        elif event.kind == "resume" and paused_at is not None:
            out.append(_pause_rect(y, paused_at, event.at, x, event.detail))
            paused_at = None
        elif event.kind == "fault":
            px = x(event.at)
            out.append(f'<g class="fault-mark"><title>{_e(event.detail)}</title>')
            out.append(f'<line class="fault" x1="{px:.1f}" x2="{px:.1f}" y1="{y + 2}" y2="{y + 50}"/>')
            out.append(
                f'<text class="fault-label" x="{px + 3:.1f}" y="{y + 6}">{_e(event.detail)}</text></g>'
            )
    if paused_at is not None:
        out.append(_pause_rect(y, paused_at, x.end, x, "still paused"))
    return out


def _pause_rect(y: float, t1: float, t2: float, x: Scale, detail: str) -> str:
    x1, x2 = x(t1), x(t2)
    return (
        f'<rect class="pause" x="{x1:.1f}" y="{y + 4}" width="{max(x2 - x1, 2):.1f}" height="44">'
        f"<title>paused {t2 - t1:.3f}s {_e(detail)}</title></rect>"
    )


def _marks(y: float, lane: Sequence[Event], interleaved: set[int], x: Scale) -> list[str]:
    out = []
    for event in lane:
        px = x(event.at)
        if event.kind == "read" and event.outcome != "sent":
            out.append(f'<line class="read" x1="{px:.1f}" x2="{px:.1f}" y1="{y + 34}" y2="{y + 50}"/>')
        elif event.kind == "write" and event.outcome != "sent":
            outcome = {"ok": "accepted", "refused": "refused"}.get(event.outcome, "error")
            classes = f"write {outcome}" + (" interleaved" if event.seq in interleaved else "")
            token = "" if event.token is None else f" t{event.token}"
            tick = {"accepted": "✓", "refused": "✗"}.get(outcome, "?")
            out.append(
                f'<g class="{classes}" data-outcome="{outcome}" data-token="{_e(event.token)}">'
                f"<title>write {_e(event.value)} {outcome}{_e(token)} {_e(event.detail)}</title>"
                f'<circle cx="{px:.1f}" cy="{y + 42}" r="6"/>'
                f'<text x="{px + 8:.1f}" y="{y + 54}">{tick} {_e(event.value)}{_e(token)}</text></g>'
            )
    return out


def _store_lane(y: float, events: Sequence[Event], interleaved: set[int], x: Scale) -> list[str]:
    out = ['<g class="store-lane">', f'<text class="label" x="8" y="{y + 30}">storage</text>']
    out.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y + 44}" y2="{y + 44}"/>')
    for event in events:
        if event.accepted and event.kind == "write":
            px = x(event.at)
            flag = " interleaved" if event.seq in interleaved else ""
            fill = "#f79009" if flag else "#12b76a"
            what = f"seq {event.seq}: {event.client} wrote {event.value}"
            out.append(
                f'<g class="stored{flag}"><title>{_e(what)}</title>'
                f'<rect x="{px - 4:.1f}" y="{y + 36}" width="8" height="16" fill="{fill}"/>'
                f'<text x="{px + 6:.1f}" y="{y + 30}" font-size="11">{_e(event.value)}</text></g>'
            )
    out.append("</g>")
    return out


def _summary(runs: Sequence[RunResult]) -> str:
    head = "".join(f"<th>{label}</th>" for _, label in COLUMNS)
    rows = []
    for index, run in enumerate(runs):
        meta, verdict = run.history.meta, run.verdict
        cells = "".join(f"<td>{getattr(verdict, field)}</td>" for field, _ in COLUMNS)
        state = '<td class="safe">SAFE</td>' if verdict.safe else '<td class="unsafe">UNSAFE</td>'
        tokens = f" / {meta.tokens} tokens" if meta.tokens else ""
        name = f"{meta.scenario} / {meta.mode} / {meta.lock}{tokens} / seed {meta.seed}"
        rows.append(f'<tr><td class="name"><a href="#run-{index}">{_e(name)}</a></td>{cells}{state}</tr>')
    header = f'<tr><th class="name">run</th>{head}<th>verdict</th></tr>'
    return f'<table class="summary">{header}{"".join(rows)}</table>'


def render_html(runs: Sequence[RunResult], *, title: str = "fencegate lab") -> str:
    """The whole self-contained report."""
    sections = []
    for index, run in enumerate(runs):
        meta = run.history.meta
        tokens = f", tokens from {meta.tokens}" if meta.tokens else ""
        sections.append(
            f'<section id="run-{index}"><h2>{_e(meta.scenario)}: {_e(meta.mode)}, lock {_e(meta.lock)}, '
            f"seed {meta.seed}{_e(tokens)}</h2>{render_run(run, index)}</section>"
        )
    legend = (
        '<p class="legend"><span>blue bar: lease while valid (dashed outline: a token, no lock)</span>'
        "<span>red dashes: used after expiry</span>"
        "<span>grey: paused</span><span>purple line: fault</span><span>green: write accepted</span>"
        "<span>red: refused</span><span>amber: accepted out of turn (interleaved)</span>"
        "<span>pale band: idle time drawn short, labelled with its real length</span></p>"
    )
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>{_summary(runs)}{legend}"
        f"{''.join(sections)}</body></html>"
    )


def write_svg(run: RunResult, path: Path | str) -> Path:
    """One run's timeline as a standalone .svg file (for docs)."""
    target = Path(path)
    target.write_text(render_run(run, 0, standalone=True), encoding="utf-8")
    return target


def write_html(runs: Sequence[RunResult], path: Path | str, *, title: str = "fencegate lab") -> Path:
    target = Path(path)
    target.write_text(render_html(runs, title=title), encoding="utf-8")
    return target


__all__ = ["render_html", "render_run", "write_html", "write_svg"]
