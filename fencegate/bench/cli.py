"""`fencegate bench`: every benchmark, one set of servers, same-run ratios."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import textwrap
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from fencegate.bench.env import BenchEnv, bench_env
from fencegate.bench.section import Section
from fencegate.cli import UNAVAILABLE, describe, output_dir
from fencegate.lab.cluster import TERMINATED, until_terminated

Benchmark = Callable[[BenchEnv], Awaitable[Section]]


NAMES = (
    "leases",
    "scaling",
    "contention",
    "tokens",
    "gateway",
    "e2e",
    "sql",
    "proxy",
    "growth",
)  # in the order they run


def benchmarks() -> dict[str, Benchmark]:
    """Name -> benchmark, in the order they run."""
    from fencegate.bench.contention import contention
    from fencegate.bench.e2e import e2e
    from fencegate.bench.gateway import gateway
    from fencegate.bench.growth import growth
    from fencegate.bench.leases import leases, scaling
    from fencegate.bench.proxy import proxy
    from fencegate.bench.sql import sql
    from fencegate.bench.tokens import tokens

    found: dict[str, Benchmark] = {
        "leases": leases,
        "scaling": scaling,
        "contention": contention,
        "tokens": tokens,
        "gateway": gateway,
        "e2e": e2e,
        "sql": sql,
        "proxy": proxy,
        "growth": growth,
    }
    return {name: found[name] for name in NAMES}


def configure(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Start 7 redis-server masters, ZooKeeper, PostgreSQL and 3 etcd members on loopback (and SeaweedFS "
        "for the proxy bench), run each "
        "benchmark with fencegate and its peers alternately (several runs each), and print medians, p50/p99 "
        "and same-run ratios against the goals. Progress goes to stderr, also with --json. Peers come from "
        "the `bench` extra: pip install -e '.[bench]'.",
        "fencegate bench --quick --only leases",
        "fencegate bench --only leases --only scaling --json > bench.json",
        "fencegate bench --plot docs/img/bench",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 short runs per case instead of 5 long ones (a smoke run, not a measurement)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=NAMES,
        metavar="NAME",
        help="run only this benchmark (repeatable): " + ", ".join(NAMES) + " (default: all)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the results as JSON on stdout (progress stays on stderr)"
    )
    parser.add_argument(
        "--plot",
        type=output_dir,
        metavar="DIR",
        help="write one PNG chart per benchmark to DIR (default: none)",
    )
    parser.set_defaults(func=run)


async def run_all(names: list[str], *, quick: bool, quiet: bool, smoke: bool = False) -> list[Section]:
    chosen = benchmarks()
    sections = []
    async with bench_env(quick=quick, quiet=quiet, smoke=smoke) as env:
        for name in names:
            env.progress(f"== {name}")
            sections.append(await chosen[name](env))
    return sections


def plot_sections(sections: Sequence[Section], directory: Path) -> list[Path]:
    """`--plot`: a PNG bar chart of each benchmark's medians (matplotlib, headless, loaded only here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for section in sections:
        names = [f"{r.group}\n{r.name}" if r.group != section.name else r.name for r in section.results]
        rates = [r.median_rate for r in section.results]
        fig, ax = plt.subplots(figsize=(10, 0.5 + 0.45 * len(names)))
        ax.barh(names, rates, color="#3b6ea5")
        ax.invert_yaxis()
        ax.set_xlabel("median per second (higher is better)")
        ax.set_title(textwrap.fill(section.title, 100), fontsize=9)  # long titles say which workload is which
        fig.tight_layout()
        path = directory / f"{section.name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def run(args: argparse.Namespace) -> int:
    names = args.only or list(NAMES)
    for chatty in ("redis_lock", "kazoo", "pottery"):  # they log every acquire or script load at INFO
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        sections = asyncio.run(until_terminated(run_all(names, quick=args.quick, quiet=False)))
    except ImportError as exc:
        print(f"fencegate bench: {exc}: install the peers with `pip install -e '.[bench]'`", file=sys.stderr)
        return UNAVAILABLE
    except asyncio.CancelledError:
        print("fencegate bench: stopped by SIGTERM; its servers were stopped", file=sys.stderr)
        return TERMINATED
    if args.plot is not None:
        for path in plot_sections(sections, args.plot):
            print(f"wrote {path}", file=sys.stderr)
    if args.json:
        print(json.dumps([s.as_dict() for s in sections], indent=2))
    else:
        print("\n\n".join(s.render() for s in sections))
    return 0
