"""`fencegate soak`: the fault and load suite, bounded in time, on loopback; prints one table.

The exit code is 0 only if nothing acknowledged was lost, no invariant was
violated, no client error got a 5xx, no refused request changed storage and
the load did what it claims (writes acknowledged, the rate under faults at
least a third of the burst's); 1 otherwise. Progress (phases, faults injected and healed) goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import logging
import shutil
import signal
import sys
from pathlib import Path

from fencegate.bench.wrk import wrk_available
from fencegate.cli import (
    UNAVAILABLE,
    USAGE,
    describe,
    output_dir,
    positive_int,
    positive_seconds,
    seconds,
    settings_from,
)
from fencegate.lab.cluster import TERMINATED, until_terminated
from fencegate.soak.load import SoakConfig
from fencegate.soak.run import STATE_DIR, soak

DEFAULTS = SoakConfig()


def configure(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Start a private cluster (5 Redis, ZooKeeper, PostgreSQL, 2 gateways on it) under --state-dir, "
        "measure the gateways' fenced PUT rate with an unfaulted wrk burst, then run leased clients and "
        "unleased writers through the gateways while faults are injected (kill -9 of a gateway, "
        "PostgreSQL stopped, PostgreSQL SIGSTOPped, a Redis master paused, ZooKeeper restarted); every "
        "write without a definite answer is retried with its Idempotency-Key. Checks the history, the "
        "stored objects and the audit trail, then fuzzes the API with bad input. Prints one table (or "
        "--json) with the rate held under faults against the burst's; exit 0 when nothing acknowledged "
        "was lost, no invariant broke, no retried write was applied twice, writes were acknowledged and "
        "the rate under faults held a third of the burst's, 1 otherwise.",
        "fencegate soak --duration 60",
        "fencegate soak --duration 300 --clients 16",
    )
    parser.add_argument(
        "--duration", type=positive_seconds, default=DEFAULTS.duration, help="seconds of load"
    )
    parser.add_argument(
        "--clients", type=positive_int, default=DEFAULTS.clients, help="concurrent leased clients"
    )
    parser.add_argument(
        "--resources", type=positive_int, default=DEFAULTS.resources, help="contended resources"
    )
    parser.add_argument(
        "--outage", type=positive_seconds, default=DEFAULTS.outage, help="seconds of each outage"
    )
    parser.add_argument("--writers", type=positive_int, default=DEFAULTS.writers, help="unleased writers")
    parser.add_argument(
        "--in-flight",
        type=positive_int,
        default=DEFAULTS.in_flight,
        help="concurrent requests of each unleased writer",
    )
    parser.add_argument(
        "--bench-seconds",
        type=seconds,
        default=DEFAULTS.bench_seconds,
        help="seconds of the unfaulted wrk burst that measures the gateways' rate (0: skip it)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the results as JSON on stdout (progress stays on stderr)"
    )
    parser.add_argument(
        "--schemathesis-examples", type=positive_int, default=50, help="generated cases per API operation"
    )
    parser.add_argument("--raw-examples", type=positive_int, default=500, help="raw fuzzed requests")
    parser.add_argument(
        "--state-dir",
        type=output_dir,
        default=str(STATE_DIR),  # a string: the parser checks it as it checks a given path
        help="a new or empty directory, or one an earlier soak made: emptied, then holds the servers' "
        "data and logs",
    )
    parser.set_defaults(func=run)


MARKER = ".fencegate-soak"  # in a state directory a soak made, which the next soak may empty


def run(args: argparse.Namespace) -> int:
    if args.bench_seconds > 0 and not wrk_available():
        print(
            "fencegate soak: wrk is not installed; run `make servers`, or pass --bench-seconds 0",
            file=sys.stderr,
        )
        return UNAVAILABLE
    config = settings_from(SoakConfig, args)
    state: Path = args.state_dir
    earlier = (state / MARKER).exists() or (state / "cluster").is_dir()  # a soak's, marked or not yet
    if state.exists() and not earlier and (not state.is_dir() or any(state.iterdir())):
        print(
            f"fencegate soak: --state-dir {state} holds files a soak did not write, and a soak empties it "
            "first: give a new or empty directory",
            file=sys.stderr,
        )
        return USAGE
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1` shows where a run is
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # reconnects during the ZooKeeper restart are expected
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    (state / MARKER).touch()  # the next soak may empty it
    whole = soak(
        config,
        state,
        schemathesis_examples=args.schemathesis_examples,
        raw_examples=args.raw_examples,
    )
    try:
        report = asyncio.run(until_terminated(whole))
    except asyncio.CancelledError:
        print("fencegate soak: stopped by SIGTERM; its servers were stopped", file=sys.stderr)
        return TERMINATED
    print(json.dumps(report.json(), indent=2) if args.json else report.table())
    return 0 if report.ok else 1
