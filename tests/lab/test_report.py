"""The table, the JSON and the HTML report say what the checker found; Chromium renders the timelines."""

from __future__ import annotations

import contextlib
import html
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest
from PIL import Image

from fencegate.lab.history import Event, History, Meta
from fencegate.lab.labels import Rows, text_width
from fencegate.lab.report import RunResult, summary, table, to_json, token_trail
from fencegate.lab.timeline import LEFT, RIGHT, SQUEEZE, WIDTH, Scale, write_html, write_svg
from tests.lab.histories import clean_run, crowded_run, paused_holder

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_DEADLINE = 90


def runs() -> list[RunResult]:
    return [
        RunResult.of(paused_holder(Meta("pause", "lock-only", "redlock", 1), fenced=False)),
        RunResult.of(paused_holder(Meta("pause", "fenced", "redlock", 1, tokens="zookeeper"), fenced=True)),
        RunResult.of(clean_run(Meta("none", "lock-only", "single", 2))),
    ]


def test_the_table_has_a_row_per_run_with_the_checkers_numbers() -> None:
    lines = table(runs()).splitlines()
    assert lines[0].split() == [
        "scenario", "mode", "lock", "tokens", "seed", "ops", "acked", "lost", "interleaved", "refused",
        "zombies", "overlaps", "verdict",
    ]  # fmt: skip
    unsafe = ["pause", "lock-only", "redlock", "-", "1", "2", "2", "1", "1", "0", "1", "0", "UNSAFE"]
    assert lines[2].split() == unsafe
    safe = ["pause", "fenced", "redlock", "zookeeper", "1", "2", "1", "0", "0", "1", "1", "0", "SAFE"]
    assert lines[3].split() == safe
    assert len(lines) == 5


def test_the_summary_counts_unsafe_seeds() -> None:
    both = [*runs(), RunResult.of(paused_holder(Meta("pause", "lock-only", "redlock", 2), fenced=True))]
    row = next(
        line for line in summary(both).splitlines() if line.startswith("pause") and "lock-only" in line
    )
    assert row.split()[-1] == "1/2"
    assert row.split()[6] == "1"  # lost updates summed over the two seeds


def test_the_json_has_the_same_numbers_and_the_history() -> None:
    document = json.loads(json.dumps(to_json(runs())))
    first = document["runs"][0]
    assert first["meta"]["scenario"] == "pause"
    assert (first["verdict"]["lost_updates"], first["verdict"]["safe"]) == (1, False)
    assert len(first["history"]["events"]) == 10
    assert "history" not in to_json(runs(), histories=False)["runs"][0]


def token_regress(seed: int, *then: Event, final: int) -> History:
    """A fenced token-regress run: the incr source hands token 1 out twice and both writes of 1 pass."""
    events = (
        Event(0.0, "c1", "acquire", "c1/1", 1, "ok", until=3.0),
        Event(0.5, "c2", "acquire", "c2/1", 1, "ok", until=3.5),
        Event(0.6, "c2", "write", "c2/1", 1, "ok", value=1, seq=2),
        Event(0.7, "c1", "write", "c1/1", 1, "ok", value=1, seq=3),
        *then,
    )
    return History(Meta("token-regress", "fenced", "redlock", seed, tokens="incr"), events, final=final)


def test_the_token_trail_shows_tokens_going_back_and_the_stale_write_let_through() -> None:
    regressed = token_regress(
        3,
        Event(1.0, "c1", "acquire", "c1/2", 2, "ok", until=4.0),
        Event(1.1, "c1", "write", "c1/2", 2, "refused", value=2),
        final=2,
    )
    trail = token_trail(RunResult.of(regressed)).splitlines()
    assert trail == [
        "token-regress (incr tokens, seed 3):",
        "  tokens by lease start: c1/1=1, c2/1=1, c1/2=2",
        "  went back: c2/1 drew 1 after c1/1 drew 1",
        "  writes at the store: c2/1 (token 1) accepted, c1/1 (token 1) accepted OUT OF TURN, "
        "c1/2 (token 2) refused",
    ]


def test_a_standalone_svg_is_well_formed_with_one_lane_per_client(tmp_path: Path) -> None:
    path = write_svg(runs()[0], tmp_path / "pause.svg")
    root = ElementTree.parse(path).getroot()  # noqa: S314 (a file this test just wrote)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    lanes = [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "lane"]
    assert [lane.get("data-client") for lane in lanes] == ["c1", "c2"]


def chromium(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    argv = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", *args,
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=CHROMIUM_DEADLINE)
    finally:  # chromium forks helpers; its session goes down with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_chromium_renders_one_lane_per_client_and_every_write(tmp_path: Path) -> None:
    assert shutil.which(CHROMIUM), "Debian's chromium is missing: `make setup` installs it"
    report = write_html(runs(), tmp_path / "report.html")
    url = report.resolve().as_uri()
    shot = tmp_path / "shot.png"
    chromium(f"--screenshot={shot}", "--window-size=1200,900", url, tmp_path=tmp_path)
    with Image.open(shot) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 24)
    assert colours is not None
    assert len(colours) > 20  # text, lanes, leases, marks: not a blank page

    dom = chromium("--dump-dom", url, tmp_path=tmp_path).stdout
    assert len(re.findall(r'<svg class="timeline"', dom)) == 3
    assert len(re.findall(r'<g class="lane"', dom)) == 6  # two clients in each of three runs
    writes = re.findall(r'<g class="write ([a-z ]+)" data-outcome="(\w+)" data-token="(\w+)"', dom)
    assert len(writes) == 6
    assert writes[:2] == [("accepted interleaved", "accepted", "33"), ("accepted", "accepted", "34")]
    assert ("refused", "refused", "33") in writes
    assert "http" not in dom.replace("http://www.w3.org", "")  # self-contained: nothing to fetch


# Added to a copy of the report (which has no script of its own): every text's box as Chromium lays it out.
MEASURE = """<script>
const figures = [...document.querySelectorAll("svg.timeline")].map((svg) => {
  const box = (element) => {
    const r = element.getBoundingClientRect();
    return [r.left, r.top, r.right, r.bottom];
  };
  return { frame: box(svg), labels: [...svg.querySelectorAll("text")].map((t) => [t.textContent, box(t)]) };
});
const out = document.createElement("pre");
out.id = "measured";
out.textContent = JSON.stringify(figures);
document.body.append(out);
</script>"""
OVERLAP = 0.5  # px: boxes that share more than this in both directions cover each other


def overlapping(a: list[float], b: list[float]) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > OVERLAP and min(a[3], b[3]) - max(a[1], b[1]) > OVERLAP


def test_no_label_covers_another_in_chromium(tmp_path: Path) -> None:
    """The crowded history (a burst of leases, writes and long fault notes within a few pixels) and the
    usual ones, laid out by Chromium: every text stays inside its figure and clear of every other."""
    crowded = RunResult.of(crowded_run(Meta("restart", "fenced", "redlock", 1, tokens="sqlite")))
    report = write_html([crowded, *runs()], tmp_path / "report.html", predicted=True)
    shot = tmp_path / "crowded.png"
    chromium(f"--screenshot={shot}", "--window-size=1200,1600", report.as_uri(), tmp_path=tmp_path)
    with Image.open(shot) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 24)
    assert colours is not None
    assert len(colours) > 20
    page = tmp_path / "measured.html"
    page.write_text(
        report.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8"
    )
    dom = chromium("--dump-dom", page.as_uri(), tmp_path=tmp_path).stdout
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.DOTALL)
    assert found is not None, "Chromium did not run the measuring script"
    figures = json.loads(html.unescape(found.group(1)))
    assert len(figures) == 4
    texts = [text for figure in figures for text, _ in figure["labels"]]
    assert "partition: c1 reaches A, B, C; the others reach C, D, E" in texts
    assert "✓ 4 t5483" in texts
    for figure in figures:
        frame = figure["frame"]
        for text, box in figure["labels"]:
            inside = frame[0] <= box[0] and box[2] <= frame[2] and frame[1] <= box[1] and box[3] <= frame[3]
            assert inside, text
        covering = [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(figure["labels"], 2)
                    if overlapping(box_a, box_b)]  # fmt: skip
        assert covering == []


def test_labels_go_in_the_first_row_with_room() -> None:
    rows = Rows(gap=4)
    assert [rows.place(x, 30) for x in (0, 20, 34, 60, 70)] == [0, 1, 0, 1, 0]
    assert len(rows) == 2
    assert rows.place_in_one_row(200, 10)
    assert not rows.place_in_one_row(205, 10)
    assert text_width("mmmm", 10) > text_width("iiii", 10) > 0


def test_the_report_says_what_the_terminal_says(tmp_path: Path) -> None:
    """The count of verdicts as predicted, each run's prediction, the token trail, the summary over seeds."""
    regressed = token_regress(2, final=1)
    every = [*runs(), RunResult.of(regressed)]
    page = write_html(every, tmp_path / "report.html", predicted=True).read_text(encoding="utf-8")
    assert "4/4 verdicts as the seed documents predict" in page
    assert page.count("<td>as predicted</td>") == 4
    assert html.escape("went back: c2/1 drew 1 after c1/1 drew 1", quote=True) in page
    assert "<h2>Over seeds</h2>" in page  # seeds 1 and 2
    missed = RunResult.of(
        paused_holder(Meta("pause", "lock-only", "redlock", 1), fenced=True)
    )  # safe: a miss
    page = write_html([missed], tmp_path / "missed.html", predicted=True).read_text(encoding="utf-8")
    assert '<p class="missed">0/1 verdicts as the seed documents predict</p>' in page
    assert '<td class="missed">NOT as predicted</td>' in page
    assert "Over seeds" not in page
    model = write_html(every, tmp_path / "model.html").read_text(encoding="utf-8")
    assert "predict" not in model  # the model's counterexamples have no prediction


def test_the_time_scale_squeezes_only_long_idle_gaps() -> None:
    scale = Scale([0.0, 0.01, 0.02, 10.0, 10.01])
    assert scale.breaks == [(0.02, 10.0)]
    xs = [scale(t) for t in (0.0, 0.01, 0.02, 5.0, 10.0, 10.01)]
    assert xs == sorted(xs)
    assert xs[0] == LEFT
    assert xs[-1] == WIDTH - RIGHT
    drawn = WIDTH - LEFT - RIGHT
    assert xs[4] - xs[2] == pytest.approx(SQUEEZE * drawn)  # the idle 10 s: 6% of the width...
    work = [xs[1] - xs[0], xs[2] - xs[1], xs[5] - xs[4]]
    assert work == pytest.approx([(1 - SQUEEZE) * drawn / 3] * 3)  # ...the work, linear, shares the rest
    assert scale.squeezed(5.0)
    assert not scale.squeezed(0.015)


def test_many_breaks_leave_the_work_half_the_width() -> None:
    times = [float(t) for t in range(0, 110, 10)] + [0.001, 0.002]  # ten idle gaps of 10 s in 100 s
    scale = Scale(times)
    assert len(scale.breaks) == 10
    assert scale(0.002) - scale(0.0) == pytest.approx((WIDTH - LEFT - RIGHT) / 2, rel=0.01)
