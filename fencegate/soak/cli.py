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
    bounded,
    describe,
    output_dir,
    seconds_up_to,
    settings_from,
)
from fencegate.lab.cluster import TERMINATED, until_terminated
from fencegate.soak.load import SoakConfig
from fencegate.soak.run import STATE_DIR, soak

DEFAULTS = SoakConfig()
# Bounds of the counts and durations, refused as they are parsed: a soak holds 9 servers until it ends,
# so a value far past these started a run that never ended (`--clients 10**22` never got past making
# its clients). Each leased client keeps its own ZooKeeper session, and ZooKeeper takes 60 connections
# from one address (maxClientCnxns), the gateways' and the writers' sessions included.
MAX_CLIENTS = 32
MAX_RESOURCES = 1024
MAX_WRITERS = 64
MAX_IN_FLIGHT = 64  # per writer: up to 4,096 requests in flight at the two gateways
MAX_SCHEMATHESIS_EXAMPLES = 10_000  # per API operation
MAX_RAW_EXAMPLES = 100_000
MAX_DURATION = 7 * 24 * 3600  # a week
MAX_OUTAGE = 3600  # an hour: PostgreSQL stopped, PostgreSQL paused and a Redis master paused, each
MAX_BENCH_SECONDS = 3600


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
        "--duration",
        type=seconds_up_to(MAX_DURATION),
        default=DEFAULTS.duration,
        help=f"seconds of load (above 0, at most {MAX_DURATION}: a week)",
    )
    parser.add_argument(
        "--clients",
        type=bounded(MAX_CLIENTS),
        default=DEFAULTS.clients,
        help=f"concurrent leased clients (1 to {MAX_CLIENTS})",
    )
    parser.add_argument(
        "--resources",
        type=bounded(MAX_RESOURCES),
        default=DEFAULTS.resources,
        help=f"contended resources (1 to {MAX_RESOURCES})",
    )
    parser.add_argument(
        "--outage",
        type=seconds_up_to(MAX_OUTAGE),
        default=DEFAULTS.outage,
        help=f"seconds of each outage (above 0, at most {MAX_OUTAGE}: an hour)",
    )
    parser.add_argument(
        "--writers",
        type=bounded(MAX_WRITERS),
        default=DEFAULTS.writers,
        help=f"unleased writers (1 to {MAX_WRITERS})",
    )
    parser.add_argument(
        "--in-flight",
        type=bounded(MAX_IN_FLIGHT),
        default=DEFAULTS.in_flight,
        help=f"concurrent requests of each unleased writer (1 to {MAX_IN_FLIGHT})",
    )
    parser.add_argument(
        "--bench-seconds",
        type=seconds_up_to(MAX_BENCH_SECONDS, positive=False),
        default=DEFAULTS.bench_seconds,
        help="seconds of the unfaulted wrk burst that measures the gateways' rate "
        f"(0 to {MAX_BENCH_SECONDS}; 0: skip it)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the results as JSON on stdout (progress stays on stderr)"
    )
    parser.add_argument(
        "--schemathesis-examples",
        type=bounded(MAX_SCHEMATHESIS_EXAMPLES),
        default=50,
        help=f"generated cases per API operation (1 to {MAX_SCHEMATHESIS_EXAMPLES})",
    )
    parser.add_argument(
        "--raw-examples",
        type=bounded(MAX_RAW_EXAMPLES),
        default=500,
        help=f"raw fuzzed requests (1 to {MAX_RAW_EXAMPLES})",
    )
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
