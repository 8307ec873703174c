"""`fencegate lab run`, `lab all` and `lab headline`: run the comparison on real processes and faults.

Each command opens a `LabSession` (the gateway, and ZooKeeper or PostgreSQL
only when their tokens are asked for), runs every (scenario, mode) with the
same seed and fault schedule, shows progress on stderr, then prints the
table (or `--json`: the numbers and the histories) and writes the HTML
report. Exit status: 0 when every verdict is what the seed documents predict
(a lease alone unsafe under the fault, a fence safe; see
`lab.predictions`), 1 when one is not, 4 when some runs could not
be made (the others are reported); a bad option is 2 and a server that is
missing or does not start 3, before any run (`fencegate.cli`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from fencegate.cli import INCOMPLETE, bounded, output_dir, output_file
from fencegate.lab.cluster import TERMINATED, until_terminated
from fencegate.lab.deployments import DESIGNS, ETCD, MODES, Mode
from fencegate.lab.errors import LabArgumentError, LabError
from fencegate.lab.history import Meta
from fencegate.lab.predictions import (
    GATEWAY,
    PROXY_SCENARIOS,
    PROXY_STORES,
    inapplicable,
    store_inapplicable,
)
from fencegate.lab.report import RunResult, as_predicted, predicted_line, summary, table, to_json, token_trail
from fencegate.lab.scenarios import SCENARIOS, RunPlan
from fencegate.lab.session import (
    STORE_CHOICES,
    TOKEN_KINDS,
    LabSession,
    RunSpec,
    one_node_note,
    plan_runs,
    servers_for,
)
from fencegate.lab.timeline import write_html, write_svg

HEADLINE = ("pause", "restart", "token-regress")
ALL = tuple(name for name in SCENARIOS if name != "none")  # "none" is the fault-free baseline
DEFAULT_REPORT = ".state/lab/report.html"  # a string: the parser checks it as it checks a given path
# Bounds of the counts, refused as they are parsed: each client is a Python process and a run waits for
# every one (a huge count never got past building their configs), so far past these a run never ends.
MAX_CLIENTS = 64
MAX_OPS = 10_000
MAX_SEEDS = 1_000
OLD_LOCK_ONLY = "redis-only"  # lock-only's name before the lab had a lock design that is not Redis


def _ttl(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.2 <= value <= 30:
        raise argparse.ArgumentTypeError(f"TTL {value} s: use 0.2..30 seconds (the lab waits TTLs out)")
    return value


def _mode(text: str) -> str:
    """A mode name; the old name of lock-only is still accepted, with a note, for one release."""
    if text == OLD_LOCK_ONLY:
        print(f"note: --mode {OLD_LOCK_ONLY} is now called lock-only; the old name goes in the next release",
              file=sys.stderr)  # fmt: skip
        return "lock-only"
    return text


def _options(parser: argparse.ArgumentParser, *, modes: bool, store: str = GATEWAY) -> None:
    if modes:
        parser.add_argument(
            "--store",
            choices=list(STORE_CHOICES),
            default=store,
            help="where the counter lives: gateway (the built-in store behind `fencegate serve`), sql "
            "(a row in a user table on PostgreSQL, started for the run: lock-only with plain UPDATEs; "
            "fenced by fence() in each of the client's transactions (store sql), and by the table's "
            "trigger with clients that only write their token (store sql-trigger, fenced mode only)), "
            "s3 (two gateway replicas on PostgreSQL in front of SeaweedFS, started for the run: writes "
            "conditional at the store (store s3) or not (store s3-unconditional); fenced mode, proxy-delay "
            "and proxy-delete only), all: every one "
            f"(default: {store}; the sql rows run pause and none only; `lab run` of proxy-delay or "
            "proxy-delete defaults to s3)",
        )
        parser.add_argument(
            "--mode",
            type=_mode,
            choices=[*MODES, "all"],
            default="all",
            help="lock-only: the lock design alone, no token check; fenced: lease + token through the fence; "
            "fence-only: tokens, no lock; all (default): the three, same seed and fault schedule "
            f"(token-regress always runs fenced; {OLD_LOCK_ONLY}, the old name of lock-only, still works)",
        )
    parser.add_argument(
        "--lock",
        choices=[*DESIGNS, "all"],
        default="redlock",
        help="lock design: redlock (5 masters), single (SET NX PX on one node), setnx-getset "
        "(the SETNX page's timestamp pattern on one node), etcd (etcd's Session + Mutex on a 3-member "
        "cluster, fenced by its lock key's create revision), all: the four, one after another "
        "(each only in the scenarios that apply to it)",
    )
    parser.add_argument(
        "--tokens",
        choices=TOKEN_KINDS,
        default="sqlite",
        help="token source of the fenced and fence-only modes: sqlite (embedded), zookeeper, "
        "postgres or etcd (started for the run), incr (redis INCR, unsafe); token-regress always adds "
        "incr; --lock etcd always uses etcd's revisions",
    )
    parser.add_argument(
        "--clients",
        type=bounded(MAX_CLIENTS),
        default=3,
        help=f"client processes per run (2 to {MAX_CLIENTS})",
    )
    parser.add_argument(
        "--ops", type=bounded(MAX_OPS), default=3, help=f"increments each client attempts (1 to {MAX_OPS})"
    )
    parser.add_argument(
        "--ttl",
        type=_ttl,
        default=1.0,
        help="lease TTL in seconds (x3 where "
        "the fault eats into the lease: clock-jump, restart, failover, token-regress)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the clients' jitter")
    parser.add_argument(
        "--seeds",
        type=bounded(MAX_SEEDS),
        default=1,
        help=f"run seeds SEED..SEED+N-1 (N from 1 to {MAX_SEEDS})",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the numbers and histories as JSON (progress stays on stderr)",
    )
    parser.add_argument(
        "--report",
        type=output_file,
        default=DEFAULT_REPORT,
        metavar="PATH",
        help="HTML timeline report",
    )
    parser.add_argument(
        "--svg",
        type=output_dir,
        metavar="DIR",
        help="also write each run's timeline as DIR/lab-SCENARIO-MODE.svg, for docs (default: none)",
    )
    parser.add_argument(
        "--workdir",
        type=output_dir,
        metavar="DIR",
        help="keep every run's files here, its history as DIR/runs/RUN/history.jsonl for `lab report` "
        "(default: a temporary dir, removed)",
    )


def add_commands(commands: Any) -> None:
    """`lab run`, `lab all` and `lab headline`, on the lab's sub-command action."""
    run = commands.add_parser(
        "run",
        help="run one scenario in each mode and print the table",
        description="Run one scenario on real processes and real faults: a lock alone, fenced, fence-only.",
    )
    run.epilog = (
        "examples:\n  fencegate lab run --scenario pause\n"
        "  fencegate lab run --scenario restart --mode fenced --tokens zookeeper --seeds 3"
    )
    run.add_argument(
        "--scenario", required=True, choices=list(SCENARIOS), help="see `fencegate lab scenarios`"
    )
    _options(run, modes=True)
    run.set_defaults(store=None, func=_run)
    every = commands.add_parser(
        "all",
        help="run every scenario in every mode (a few minutes)",
        description="Run every scenario in every mode asked for, with one seed and fault schedule per seed.",
    )
    every.epilog = "example:\n  fencegate lab all --seeds 5 --json > lab.json"
    _options(every, modes=True, store="all")
    every.set_defaults(func=lambda args: _command(args, list(ALL)))
    headline = commands.add_parser(
        "headline",
        help="the headline comparison: pause, restart, token-regress in every mode",
        description="pause, restart and token-regress, in every mode, on the embedded default (Redlock over "
        "5 local redis masters, SQLite tokens, the gateway on SQLite). Exits 0 when lock-only is unsafe "
        "and the fence safe, as the seed documents predict.",
    )
    headline.epilog = "examples:\n  fencegate lab headline\n  fencegate lab headline --lock all --seeds 3"
    _options(headline, modes=False)
    headline.set_defaults(func=lambda args: _command(args, list(HEADLINE)), mode="all", store=GATEWAY)


def run_store(scenario: str, store: str | None) -> str:
    """The store `lab run` uses: the one asked for, else the s3 stores for the scenarios only they run,
    else the gateway."""
    if store is not None:
        return store
    return "s3" if scenario in PROXY_SCENARIOS else GATEWAY


def _run(args: argparse.Namespace) -> int:
    args.store = run_store(args.scenario, args.store)
    return _command(args, [args.scenario], strict=args.lock != "all" and args.store != "all")


def _applicable(scenarios: Sequence[str], design: str, store: str, *, strict: bool) -> list[str]:
    """The scenarios that apply to `design` and have rows on `store`; the others are refused (`strict`)
    or skipped with a note."""
    if strict:
        return list(scenarios)  # plan_runs refuses an inapplicable one, naming why
    skipped = [name for name in scenarios if inapplicable(design, name) is not None]
    if skipped and store == GATEWAY:  # the design's note once, on the store that runs every scenario
        print(f"note: --lock {design} skips {', '.join(skipped)} (they do not apply to it; see "
              "`fencegate lab run --lock DESIGN --scenario NAME` for why)", file=sys.stderr)  # fmt: skip
    return [name for name in scenarios if name not in skipped and store_inapplicable(store, name) is None]


def _command(args: argparse.Namespace, scenarios: Sequence[str], *, strict: bool = False) -> int:
    if args.clients < 2:
        raise LabArgumentError("every scenario needs a holder and a challenger: use --clients 2 or more")
    modes: tuple[Mode, ...] = MODES if args.mode == "all" else (args.mode,)
    seeds = range(args.seed, args.seed + args.seeds)
    designs = DESIGNS if args.lock == "all" else (args.lock,)
    stores = STORE_CHOICES[args.store]
    chosen = {
        (design, store): _applicable(scenarios, design, store, strict=strict)
        for store in stores
        for design in designs
    }
    specs = [
        spec
        for (design, store), names in chosen.items()
        for spec in plan_runs(names, modes, design=design, tokens=args.tokens, seeds=seeds, store=store)
    ]
    plan = RunPlan(clients=args.clients, ops=args.ops, ttl=args.ttl)
    for design in designs:
        note = one_node_note(chosen[design, stores[0]], design)
        if note is not None:
            print(f"note: {note}", file=sys.stderr)
    for store in stores:
        skipped = [name for name in scenarios if store_inapplicable(store, name) is not None]
        if skipped and not strict:
            why = (
                "it runs proxy-delay and proxy-delete only; the other faults hit the lock, whatever store is "
                "behind it"
                if store in PROXY_STORES
                else "a lock node's faults hit the lock, whatever store is behind it: the gateway's rows "
                "show them; proxy-delay and proxy-delete run on the s3 stores"
            )
            print(f"note: the {store} store skips {', '.join(skipped)} ({why})", file=sys.stderr)
    if ETCD in designs and args.tokens not in ("sqlite", ETCD):
        print(f"note: --lock etcd fences with its lock key's create revision; --tokens {args.tokens} "
              "serves the other designs", file=sys.stderr)  # fmt: skip
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="fencegate-lab-"))
    started = time.monotonic()
    try:
        runs, failures = asyncio.run(until_terminated(_run_all(specs, plan, workdir, sys.stderr)))
    except asyncio.CancelledError:
        print("fencegate lab: stopped by SIGTERM; its servers and clients were stopped", file=sys.stderr)
        return TERMINATED
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    _print(runs, args, time.monotonic() - started)
    if failures:
        print(
            f"fencegate lab: {failures} of {len(specs)} runs could not be made (see above)", file=sys.stderr
        )
        return INCOMPLETE
    return 0 if all(as_predicted(run) for run in runs) else 1


async def _run_all(
    specs: Sequence[RunSpec], plan: RunPlan, workdir: Path, out: TextIO
) -> tuple[list[RunResult], int]:
    kinds = servers_for(specs)
    runs: list[RunResult] = []
    failures = 0
    async with LabSession.open(workdir, token_kinds=kinds) as session:
        for number, spec in enumerate(specs, start=1):
            count = f"{number:>{len(str(len(specs)))}}/{len(specs)}"
            store = "" if spec.store == GATEWAY else f" {spec.store}"
            run = f"{spec.scenario} {spec.mode} {spec.design}{store} {spec.tokens or '-'} seed {spec.seed}"
            label = f"[{count}] {run}"
            print(f"{label} ...", file=out, end="", flush=True)
            started = time.monotonic()
            try:
                result = RunResult.of(await session.run(spec, plan))
            except LabError as exc:
                failures += 1
                print(f" FAILED ({exc})", file=out, flush=True)
                continue
            except BaseException:
                print(" stopped", file=out, flush=True)  # the error's own line starts on a line of its own
                raise
            runs.append(result)
            verdict = "SAFE" if result.verdict.safe else "UNSAFE"
            hint = "as predicted" if as_predicted(result) else "NOT as predicted"
            print(f" {verdict}, {hint} ({time.monotonic() - started:.1f}s)", file=out, flush=True)
    return runs, failures


def svg_name(meta: Meta) -> str:
    """token-regress runs are told apart by their token source, the others by their mode."""
    which = meta.tokens if meta.scenario == "token-regress" else meta.mode
    lock = "" if meta.lock == "redlock" else f"-{meta.lock}"
    store = "" if meta.store == GATEWAY else f"-{meta.store}"
    return f"lab-{meta.scenario}-{which}{lock}{store}.svg"


def _print(runs: Sequence[RunResult], args: argparse.Namespace, elapsed: float) -> None:
    report = write_html(runs, args.report, predicted=True) if runs else None
    if args.svg is not None:
        for run in runs:
            write_svg(run, args.svg / svg_name(run.history.meta))
    where = sys.stderr if args.json else sys.stdout
    if args.json:
        print(json.dumps(to_json(runs), indent=2))
    else:
        print(table(runs))
        for run in runs:
            if run.history.meta.scenario == "token-regress" and run.history.meta.seed == args.seed:
                print()
                print(token_trail(run))
        if args.seeds > 1:
            print()
            print(summary(runs))
    print(f"{predicted_line(runs)}; {elapsed:.0f}s", file=where)
    if report is not None:
        print(f"report: {report.resolve()}", file=where)


__all__ = ["ALL", "HEADLINE", "add_commands", "svg_name"]
