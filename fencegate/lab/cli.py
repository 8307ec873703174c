"""`fencegate lab`: judge recorded histories and print or render the results.

`fencegate lab scenarios` lists the fault schedules and the lock designs
each cannot run on (`lab.predictions.INAPPLICABLE`); `fencegate lab run`,
`lab all` and `lab headline` (in `lab.run_cli`) run them.
`fencegate lab report HISTORY.jsonl...` runs the checker over history files
(written by `History.dump`: each run of `lab run --workdir DIR` keeps one,
and `model check --history-dir` converts the spin model's trails), prints
the table, and with `--json` the JSON document instead, with `--html PATH`
the self-contained timeline report as well. A file that is not a history is
refused with the reason, before anything is printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fencegate.cli import add_action, add_actions, describe, output_file
from fencegate.lab import run_cli
from fencegate.lab.errors import HistoryError
from fencegate.lab.history import History
from fencegate.lab.predictions import INAPPLICABLE, inapplicable
from fencegate.lab.report import RunResult, summary, table, to_json
from fencegate.lab.timeline import write_html


def configure(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "The safety lab: the same workload on real processes and real faults, a lock alone vs fenced vs "
        "fence-only. Exit 0 when every verdict is as the seed documents predict, 1 when one is not.",
        "fencegate lab headline",
        "fencegate lab run --scenario pause --mode all",
        "fencegate lab all --seeds 5 --json > lab.json",
        "fencegate lab run --scenario pause --seeds 3 --workdir lab-runs",
        "fencegate lab report lab-runs/runs/*/history.jsonl --summary --html report.html",
    )
    commands = add_actions(parser, dest="lab_command", metavar="LAB_COMMAND")
    report = add_action(
        commands,
        "report",
        run_report,
        "fencegate lab run --scenario pause --workdir lab-runs",
        "fencegate lab report lab-runs/runs/*/history.jsonl --html report.html",
        help="check history files and print the table (or JSON), optionally write the HTML report",
        description="Run the checker over recorded history files (JSON Lines, one run each): `lab run "
        "--workdir DIR` keeps each run's as DIR/runs/RUN/history.jsonl, `model check --history-dir DIR` "
        "writes a counterexample's. Exit 0 when every run is safe, 1 when one is not.",
    )
    report.add_argument("histories", nargs="+", type=Path, metavar="HISTORY.jsonl")
    report.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    report.add_argument("--no-events", action="store_true", help="with --json: leave the histories out")
    report.add_argument("--summary", action="store_true", help="one row per scenario/mode/lock over seeds")
    report.add_argument(
        "--html",
        type=output_file,
        metavar="PATH",
        help="also write the HTML timeline report here (default: none)",
    )
    scenarios = add_action(
        commands,
        "scenarios",
        list_scenarios,
        "fencegate lab scenarios",
        "fencegate lab scenarios --json",
        help="list the scenarios, what each fault does and the lock designs it cannot run on",
    )
    scenarios.add_argument(
        "--json", action="store_true", help="print them as JSON, with why a design cannot run each"
    )
    run_cli.add_commands(commands)


def list_scenarios(args: argparse.Namespace) -> int:
    from fencegate.lab.scenarios import (
        SCENARIOS,  # starts nothing, but pulls in redis and the fault machinery
    )

    refused = {
        name: {lock: why for lock in INAPPLICABLE if (why := inapplicable(lock, name))} for name in SCENARIOS
    }
    if args.json:
        document = [
            {"name": name, "summary": scenario.summary, "not_on_lock": refused[name]}
            for name, scenario in SCENARIOS.items()
        ]
        print(json.dumps(document, indent=2))
        return 0
    locks = {
        name: "not --lock " + ",".join(refused[name]) if refused[name] else "any lock" for name in SCENARIOS
    }
    width, locks_width = max(len(name) for name in SCENARIOS), max(len(text) for text in locks.values())
    for name, scenario in SCENARIOS.items():
        print(f"{name.ljust(width)}  {locks[name].ljust(locks_width)}  {scenario.summary}")
    return 0


def _load(path: Path) -> History:
    try:
        return History.load(path)
    except OSError as exc:
        raise HistoryError(f"cannot read {path}: {exc.strerror}") from exc


def run_report(args: argparse.Namespace) -> int:
    runs = [RunResult.of(_load(path)) for path in args.histories]
    if args.json:
        print(json.dumps(to_json(runs, histories=not args.no_events), indent=2))
    else:
        print(summary(runs) if args.summary else table(runs))
    if args.html is not None:
        path = write_html(runs, args.html, predicted=True)
        print(f"report: {path.resolve()}", file=sys.stderr if args.json else sys.stdout)
    return 0 if all(run.verdict.safe for run in runs) else 1
