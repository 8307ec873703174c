"""The table, the JSON and the HTML report say what the checker found; Chromium renders the timelines."""

from __future__ import annotations

import contextlib
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
from fencegate.lab.report import RunResult, summary, table, to_json, token_trail
from fencegate.lab.timeline import LEFT, RIGHT, SQUEEZE, WIDTH, Scale, write_html, write_svg
from tests.lab.histories import clean_run, paused_holder

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


def test_the_token_trail_shows_tokens_going_back_and_the_stale_write_let_through() -> None:
    regressed = History(
        Meta("token-regress", "fenced", "redlock", 3, tokens="incr"),
        (
            Event(0.0, "c1", "acquire", "c1/1", 1, "ok", until=3.0),
            Event(0.5, "c2", "acquire", "c2/1", 1, "ok", until=3.5),
            Event(0.6, "c2", "write", "c2/1", 1, "ok", value=1, seq=2),
            Event(0.7, "c1", "write", "c1/1", 1, "ok", value=1, seq=3),
            Event(1.0, "c1", "acquire", "c1/2", 2, "ok", until=4.0),
            Event(1.1, "c1", "write", "c1/2", 2, "refused", value=2),
        ),
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


def test_the_time_scale_squeezes_only_long_idle_gaps() -> None:
    scale = Scale([0.0, 0.01, 0.02, 10.0, 10.01])
    assert scale.breaks == [(0.02, 10.0)]
    xs = [scale(t) for t in (0.0, 0.01, 0.02, 5.0, 10.0, 10.01)]
    assert xs == sorted(xs)
    assert xs[0] == LEFT
    assert xs[-1] == WIDTH - RIGHT
    per_second = (xs[2] - xs[0]) / 0.02  # the work is drawn linearly...
    assert xs[4] - xs[2] == pytest.approx(per_second * 10.01 * SQUEEZE)  # ...the idle 10 s as 6% of the run
    assert scale.squeezed(5.0)
    assert not scale.squeezed(0.015)
