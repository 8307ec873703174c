"""One run's timeline as an SVG figure, drawn as Kleppmann's figure.

A lane per client shows its lease spans (solid while valid, dashed once the
lease expired while the client still acted on it), its pauses and the faults
the lab injected, each read as a tick and each write as a mark: green when the
store accepted it, red when it was refused, amber when accepted out of turn
(an interleaved request), grey on a transport error; the token is written
beside it. A storage lane below shows the store's acceptance order. Long
idle stretches (a TTL running out, a pause) are drawn short and labelled with
their real length, so the milliseconds of work stay readable. The style is
here too, since a standalone .svg file carries it; `lab.timeline` puts the
figures in the HTML report.
"""

from __future__ import annotations

import bisect
import html
import itertools
import math
from collections.abc import Sequence

from fencegate.lab.checker import LeaseSpan, lease_spans
from fencegate.lab.history import Event
from fencegate.lab.labels import Rows, text_width
from fencegate.lab.report import RunResult

__all__ = ["CSS", "LEFT", "RIGHT", "SQUEEZE", "WIDTH", "Scale", "render_run"]

WIDTH = 1100
LEFT = 110  # room for lane labels
RIGHT = 70  # room for the last write's label
TOP = 30
SQUEEZE = (
    0.06  # an idle gap longer than this fraction of the run is drawn this share of the width, as a break
)
BREAKS_SHARE = 0.5  # the breaks together take at most this share of the width; the work keeps the rest
LABEL = 11  # px, the labels of leases, faults, writes and the store
SMALL = 10  # px, the time axis and the squeezed gaps
ROW = 15  # px from one row of labels to the next (an 11 px label is 13 px tall)
EDGE = 2  # px kept free at the figure's right edge

CSS = (
    """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d232a; background: #fff; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin: 28px 0 4px; }
table.summary { border-collapse: collapse; margin: 8px 0 16px; }
table.summary th, table.summary td { border: 1px solid #ccd3da; padding: 3px 8px; text-align: right; }
table.summary td.name, table.summary th.name { text-align: left; }
.unsafe { color: #b42318; font-weight: 600; } .safe { color: #067647; font-weight: 600; }
.missed { color: #b42318; font-weight: 600; } pre.trail { margin: 4px 0 8px; font-size: 13px; }
svg { background: #fafbfc; border: 1px solid #e3e8ee; }
.axis { stroke: #c3cbd3; } .label { font-size: 13px; fill: #1d232a; }
.lease rect { fill: #cfe3fb; stroke: #4a86c5; } .epoch rect { fill: #eef4fb; stroke-dasharray: 3 3; }
.expired { stroke: #b42318; stroke-width: 2; stroke-dasharray: 5 4; }
.pause { fill: #9aa5b1; opacity: .45; } .fault { stroke: #7a2e9e; stroke-width: 2; }
.read { stroke: #4a5562; stroke-width: 2; } .write circle { stroke: #1d232a; stroke-width: 1; }
.accepted circle { fill: #12b76a; } .refused circle { fill: #f04438; }
.interleaved circle { fill: #f79009; } .error circle { fill: #98a2b3; }
.legend span { margin-right: 14px; } .break rect { fill: #eef1f4; opacity: .7; }
"""
    # the sizes the label layout measures with (lab.labels)
    f".label-text {{ font-size: {LABEL}px; fill: #1d232a; }} .lease-label, .lease text {{ fill: #24507d; }}"
    f" .fault-label {{ fill: #7a2e9e; }} .tick, .break text {{ font-size: {SMALL}px; fill: #66717d; }}\n"
)


class Scale:
    """Time to x, with long idle stretches squeezed so that the bursts of work stay readable.

    A run is mostly waiting (for a TTL, a pause, a delayed restart) around a
    few milliseconds of work. A gap between consecutive events longer than
    `SQUEEZE` of the run is a break: drawn `SQUEEZE` of the figure's width
    (less when there are so many that the work would get under half of it)
    and labelled with its real length. The work shares the rest, linearly.
    """

    def __init__(self, times: Sequence[float]) -> None:
        points = sorted(set(times))
        self.start, self.end = points[0], points[-1]
        cap = max(self.end - self.start, 1e-6) * SQUEEZE
        gaps = list(itertools.pairwise(points))
        self.breaks: list[tuple[float, float]] = [(t0, t1) for t0, t1 in gaps if t1 - t0 > cap]
        linear = sum(t1 - t0 for t0, t1 in gaps) - sum(t1 - t0 for t0, t1 in self.breaks)
        count = len(self.breaks)
        wide = 1 / count if count and linear <= 0 else min(SQUEEZE, BREAKS_SHARE / max(count, 1))
        rate = (1 - count * wide) / linear if linear > 0 else 0.0  # share of the width per second of work
        broken = set(self.breaks)
        self._knots: list[tuple[float, float]] = [(points[0], 0.0)]
        for t0, t1 in gaps:
            step = wide if (t0, t1) in broken else (t1 - t0) * rate
            self._knots.append((t1, self._knots[-1][1] + step))
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
    body: list[str] = []
    y = float(TOP)
    for client in clients:
        lane_events = [e for e in events if e.client == client]
        parts, height = _lane(client, y, lane_events, spans, interleaved, x)
        body += parts
        y += height
    parts, height = _store_lane(y, events, interleaved, x)
    body += parts
    bottom = y + height
    parts, height = _bottom(TOP, bottom, x)  # the breaks' bands go under the lanes, so they come first
    total = bottom + height
    head = f'xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {total:.0f}" ' if standalone else ""
    out = [f'<svg class="timeline" data-run="{index}" {head}width="{WIDTH}" height="{total:.0f}" role="img">']
    if standalone:
        out.append(f"<style>svg {{ font: 14px system-ui, sans-serif; }} {CSS}</style>")
    return "".join([*out, *parts, *body, "</svg>"])


def _label_x(anchor: float, width: float) -> float:
    """Where a label starts: at its anchor, or moved left so that it ends inside the figure."""
    return max(0.0, min(anchor, WIDTH - EDGE - width))


def _bottom(top: float, bottom: float, x: Scale) -> tuple[list[str], float]:
    """The squeezed gaps' bands and labels, and the time axis under them; the height below `bottom`."""
    out = ['<g class="breaks">']
    labels = Rows()
    placed = []
    for t0, t1 in x.breaks:
        x0, x1 = x(t0), x(t1)
        text = f"+{t1 - t0:.2f}s"
        width = text_width(text, SMALL)
        start = _label_x((x0 + x1 - width) / 2, width)
        placed.append((x0, x1, text, start, labels.place(start, width)))
    axis = bottom + len(labels) * ROW + 10
    for x0, x1, text, start, row in placed:
        out.append(
            f'<g class="break"><rect x="{x0 + 4:.1f}" y="{top}" width="{max(x1 - x0 - 8, 1):.1f}" '
            f'height="{axis - 12 - top:.1f}"/><text class="label-text" x="{start:.1f}" '
            f'y="{bottom + 11 + row * ROW:.1f}">{_e(text)}</text></g>'
        )
    out.append("</g>")
    out += _time_axis(axis, x)
    return out, axis - bottom + 18


def _time_axis(y: float, x: Scale) -> list[str]:
    """Seconds since the run's first event at round steps; none inside a squeezed gap, none on another."""
    span = max(x.end - x.start, 1e-6)
    step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100) if span / s <= 12)
    out = ['<g class="time-axis">']
    ticks = Rows()
    for n in range(int(span / step) + 1):
        at = x.start + n * step
        if x.squeezed(at):
            continue
        px = x(at)
        text = f"{n * step:g}s"
        width = text_width(text, SMALL)
        out.append(f'<line class="axis" x1="{px:.1f}" x2="{px:.1f}" y1="{y - 4}" y2="{y}"/>')
        start = _label_x(px - width / 2, width)
        if ticks.place_in_one_row(start, width):
            out.append(f'<text class="tick label-text" x="{start:.1f}" y="{y + 12}">{_e(text)}</text>')
    out.append("</g>")
    return out


class _Lane:
    """One client's lane: its labels laid out in rows above the lease bars (leases that are too short
    to hold their name, faults) and below the marks (writes), then drawn."""

    def __init__(self) -> None:
        self.above = Rows()
        self.below = Rows()
        self._pending: list[tuple[str, float, str, str, int]] = []  # (side, x, css class, text, row)

    def add(self, side: str, anchor: float, css: str, text: str) -> None:
        width = text_width(text, LABEL)
        start = _label_x(anchor, width)
        row = (self.above if side == "above" else self.below).place(start, width)
        self._pending.append((side, start, css, text, row))

    def bar_top(self, y: float) -> float:
        return y + 8 + len(self.above) * ROW

    def height(self) -> float:
        return len(self.above) * ROW + 58 + max(len(self.below) - 1, 0) * ROW

    def labels(self, y: float) -> list[str]:
        bar = self.bar_top(y)
        out = []
        for side, start, css, text, row in self._pending:
            baseline = bar - 4 - row * ROW if side == "above" else bar + 46 + row * ROW
            out.append(f'<text class="{css} label-text" x="{start:.1f}" y="{baseline:.1f}">{_e(text)}</text>')
        return out


def _lane(
    client: str,
    y: float,
    lane: Sequence[Event],
    spans: dict[str, LeaseSpan],
    interleaved: set[int],
    x: Scale,
) -> tuple[list[str], float]:
    """A client's lane at `y`: lease spans, pauses, faults, reads, writes; and its height."""
    layout = _Lane()
    leases = _lease_bars(client, lane, spans, x)
    anchored = [
        (x1, "above", "lease-label", text) for _, x1, x2, text, _ in leases if not _fits(text, x1, x2)
    ]
    anchored += [(x(e.at) + 3, "above", "fault-label", e.detail) for e in lane if e.kind == "fault"]
    anchored += [(x(e.at) + 8, "below", "write-label", _write_text(e)) for e in lane if _answered_write(e)]
    for anchor, side, css, text in sorted(anchored, key=lambda item: item[0]):  # first fit, left to right
        layout.add(side, anchor, css, text)
    bar = layout.bar_top(y)
    out = [f'<g class="lane" data-client="{_e(client)}">']
    out.append(f'<text class="label" x="8" y="{bar + 22}">{_e(client)}</text>')
    out.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{bar + 36}" y2="{bar + 36}"/>')
    out += _pauses(bar, y, lane, x)
    for name, x1, x2, text, expired in leases:
        span = spans[name]
        kind = "lease epoch" if math.isinf(span.expires) else "lease"  # fence-only: a token, no validity
        out.append(f'<g class="{kind}" data-lease="{_e(name)}" data-token="{_e(span.token)}">')
        out.append(f"<title>{_e(text)}</title>")
        out.append(f'<rect x="{x1:.1f}" y="{bar}" width="{max(x2 - x1, 2):.1f}" height="18" rx="3"/>')
        if _fits(text, x1, x2):
            out.append(f'<text class="label-text" x="{x1 + 3:.1f}" y="{bar + 13}">{_e(text)}</text>')
        if expired is not None:  # acted on after its validity ended
            out.append(
                f'<line class="expired" x1="{x2:.1f}" x2="{expired:.1f}" y1="{bar + 9}" y2="{bar + 9}"/>'
            )
        out.append("</g>")
    out += _marks(bar, lane, interleaved, x)
    out += layout.labels(y)
    out.append("</g>")
    return out, layout.height()


def _fits(text: str, x1: float, x2: float) -> bool:
    """A lease's name goes inside its bar when the bar is wide enough for it."""
    return text_width(text, LABEL) + 6 <= x2 - x1


def _lease_bars(
    client: str, lane: Sequence[Event], spans: dict[str, LeaseSpan], x: Scale
) -> list[tuple[str, float, float, str, float | None]]:
    """(lease, x from, x to, its label, x of its last use if that came after its validity ended)."""
    last_of: dict[str, float] = {}
    for event in lane:
        if event.lease is not None:
            last_of[event.lease] = event.at
    bars = []
    for name, span in spans.items():
        if span.client != client:
            continue
        valid_to = span.end if not math.isinf(span.end) else last_of.get(name, span.start)
        token = "" if span.token is None else f" token {span.token}"
        last = last_of.get(name, span.start)
        bars.append(
            (name, x(span.start), x(valid_to), f"{name}{token}", x(last) if last > span.expires else None)
        )
    return bars


def _pauses(bar: float, top: float, lane: Sequence[Event], x: Scale) -> list[str]:
    out = []
    paused_at: float | None = None
    for event in lane:
        if event.kind == "pause":
            paused_at = event.at
        elif event.kind == "resume" and paused_at is not None:
            out.append(_pause_rect(bar, paused_at, event.at, x, event.detail))
            paused_at = None
        elif event.kind == "fault":
            px = x(event.at)
            out.append(f'<g class="fault-mark"><title>{_e(event.detail)}</title>')
            out.append(
                f'<line class="fault" x1="{px:.1f}" x2="{px:.1f}" y1="{top + 2}" y2="{bar + 42}"/></g>'
            )
    if paused_at is not None:
        out.append(_pause_rect(bar, paused_at, x.end, x, "still paused"))
    return out


def _pause_rect(bar: float, t1: float, t2: float, x: Scale, detail: str) -> str:
    x1, x2 = x(t1), x(t2)
    return (
        f'<rect class="pause" x="{x1:.1f}" y="{bar - 4}" width="{max(x2 - x1, 2):.1f}" height="44">'
        f"<title>paused {t2 - t1:.3f}s {_e(detail)}</title></rect>"
    )


def _answered_write(event: Event) -> bool:
    return event.kind == "write" and event.outcome != "sent"


def _outcome(event: Event) -> str:
    return {"ok": "accepted", "refused": "refused"}.get(event.outcome, "error")


def _write_text(event: Event) -> str:
    tick = {"accepted": "✓", "refused": "✗"}.get(_outcome(event), "?")
    token = "" if event.token is None else f" t{event.token}"
    return f"{tick} {event.value}{token}"


def _marks(bar: float, lane: Sequence[Event], interleaved: set[int], x: Scale) -> list[str]:
    out = []
    for event in lane:
        px = x(event.at)
        if event.kind == "read" and event.outcome != "sent":
            out.append(f'<line class="read" x1="{px:.1f}" x2="{px:.1f}" y1="{bar + 26}" y2="{bar + 42}"/>')
        elif _answered_write(event):
            outcome = _outcome(event)
            classes = f"write {outcome}" + (" interleaved" if event.seq in interleaved else "")
            token = "" if event.token is None else f" t{event.token}"
            out.append(
                f'<g class="{classes}" data-outcome="{outcome}" data-token="{_e(event.token)}">'
                f"<title>write {_e(event.value)} {outcome}{_e(token)} {_e(event.detail)}</title>"
                f'<circle cx="{px:.1f}" cy="{bar + 34}" r="6"/></g>'
            )
    return out


def _store_lane(
    y: float, events: Sequence[Event], interleaved: set[int], x: Scale
) -> tuple[list[str], float]:
    """The store's acceptance order at `y`: a mark per accepted write, its value in rows above; the height."""
    stored = sorted((e for e in events if e.accepted and e.kind == "write"), key=lambda e: x(e.at))
    rows = Rows()
    placed = []
    for event in stored:
        text = str(event.value)
        width = text_width(text, LABEL)
        start = _label_x(x(event.at) + 6, width)
        placed.append((event, start, rows.place(start, width)))
    mark = y + 20 + max(len(rows) - 1, 0) * ROW
    out = ['<g class="store-lane">', f'<text class="label" x="8" y="{mark + 12}">storage</text>']
    out.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{mark + 8}" y2="{mark + 8}"/>')
    for event, start, row in placed:
        px = x(event.at)
        flag = " interleaved" if event.seq in interleaved else ""
        fill = "#f79009" if flag else "#12b76a"
        what = f"seq {event.seq}: {event.client} wrote {event.value}"
        out.append(
            f'<g class="stored{flag}"><title>{_e(what)}</title>'
            f'<rect x="{px - 4:.1f}" y="{mark}" width="8" height="16" fill="{fill}"/>'
            f'<text class="label-text" x="{start:.1f}" y="{mark - 6 - row * ROW:.1f}">'
            f"{_e(event.value)}</text></g>"
        )
    out.append("</g>")
    return out, mark - y + 24
