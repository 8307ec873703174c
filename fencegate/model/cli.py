"""`fencegate model check|doc`: run the spin model and report verdicts.

`check` searches every state of the chosen configuration, one run per
(variant, property), and prints a table (or JSON, or Markdown). Its exit
status guards what fencegate ships: 1 when `fenced`, `fence-only`,
`bound-resource`, `proxy-conditional` or `proxy-if-match` breaks a property fencing promises,
4 when a search hit its depth or memory bound, 0 otherwise. The baseline (redis-only), the rejected
designs, the gateway before objects were bound to a resource
(any-resource) and the unconditional proxy (proxy-trust-path) are expected to
break properties, and reporting that is their purpose, not a failure. The
proxy variants are a model of their own (proxy.pml) with properties of their
own: each variant is searched for the selected properties its model has.
`doc` regenerates the tables of docs/model.md from the commands recorded in
their markers (with `--check`, it only compares and fails on a difference).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from fencegate.cli import INCOMPLETE, add_action, add_actions, bounded, describe, output_dir, output_file
from fencegate.lab.history import History
from fencegate.lab.report import RunResult
from fencegate.lab.timeline import write_html, write_svg
from fencegate.model.doc import block_args, regenerate
from fencegate.model.errors import ModelArgumentError
from fencegate.model.report import as_json, history_lines, markdown_table, text_table, trail_tables
from fencegate.model.runner import DEFAULT_MAX_DEPTH, DEFAULT_MEMORY_MB, CheckResult, check_variant
from fencegate.model.variants import PROPERTIES, VARIANTS, Sizes, applicable, pick

log = logging.getLogger(__name__)
DEFAULT_DOC = "docs/model.md"
# Bounds of the sizes, refused as they are parsed (`variants.Sizes` checks them again for other callers):
# each adds a dimension to the search, and 3 clients on 5 masters already outgrow 6 GB (docs/model.md).
MAX_SIZE = 3  # clients, acquisitions per client, pauses, node faults
MAX_NODES = 5  # Redis masters: 1, 3 or 5, an odd quorum
# pan's -m: its DFS stack is allocated whole, about 53 bytes a step (53 MB here); the deepest search
# in docs/model.md reaches 346, and past 2**31 pan refuses the option (an int).
MAX_DEPTH = 1_000_000
# -DMEMLIM, MB: the top is 64 GiB, a machine's RAM in order of magnitude (a bound past the machine's
# memory ends a search by the kernel's OOM killer, not as `incomplete`); the floor is what pan's own hash
# table (128 MB) and stack take before the first state, so a smaller bound could never finish a search.
MIN_MEMORY_MB, MAX_MEMORY_MB = 256, 65_536


def configure(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Check fencegate's protocol over every interleaving of a small system (spin).",
        "fencegate model check --variant fenced,redis-only",
        "fencegate model check --clients 3 --json > model.json",
        "fencegate model doc --check",
    )
    actions = add_actions(parser)
    checker = add_action(
        actions,
        "check",
        _check,
        "fencegate model check --variant fenced --property lost-update",
        "fencegate model check --trails --report model.html",
        help="search the model and print a verdict per variant",
        description="Generate the verifier (spin -a), compile it (gcc -O2 -DSAFETY), search every "
        "state (./pan -N PROPERTY) and print a verdict per variant and property. A counterexample "
        "is replayed (spin -t -p) and translated into the lab's history events. Exit 1 when a design "
        "fencegate ships breaks a property it promises, 4 when a search hit its depth or memory bound. "
        "Progress goes to stderr, also with --json.",
    )
    add_check_arguments(checker)
    out = checker.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the results, trails included, as JSON")
    out.add_argument("--markdown", action="store_true", help="print the Markdown table of docs/model.md")
    checker.add_argument(
        "--trails", action="store_true", help="also print each counterexample as a timeline table"
    )
    checker.add_argument(
        "--history-dir",
        type=output_dir,
        metavar="DIR",
        help="write each counterexample as a lab history file DIR/VARIANT-PROPERTY.jsonl (default: none)",
    )
    checker.add_argument(
        "--report",
        type=output_file,
        metavar="PATH",
        help="write an HTML report drawing each counterexample as the lab's timeline (default: none)",
    )
    checker.add_argument(
        "--svg",
        type=output_dir,
        metavar="DIR",
        help="also write each counterexample's timeline as DIR/model-VARIANT-PROPERTY.svg, for docs "
        "(default: none)",
    )
    checker.add_argument(
        "--keep",
        type=output_dir,
        metavar="DIR",
        help="keep pan.c, pan, its output and trails under DIR (default: a temp dir, removed)",
    )

    doc = add_action(
        actions,
        "doc",
        _doc,
        "fencegate model doc",
        "fencegate model doc --check --quick",
        help="regenerate the tables in docs/model.md",
        description="Rerun the command recorded in each <!-- model-table: ARGS --> marker and "
        "replace the table below it.",
    )
    doc.add_argument("path", nargs="?", default=DEFAULT_DOC, type=Path, help="the page to regenerate")
    doc.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is stale")
    doc.add_argument(
        "--quick", action="store_true", help="only the blocks with 2 clients doing one acquisition each"
    )


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--variant",
        default="all",
        type=_names(VARIANTS, "variant"),
        metavar="V",
        help=f"{', '.join(VARIANTS)}, a comma list, or all",
    )
    parser.add_argument(
        "--property",
        default="all",
        type=_names(PROPERTIES, "property"),
        metavar="P",
        help=f"{', '.join(PROPERTIES)}, a comma list, or all",
    )
    parser.add_argument(
        "--clients",
        type=_size(MAX_SIZE, minimum=1, why="the model is sized for 1 to 3 clients"),
        default=2,
        metavar="K",
        help=f"clients (1 to {MAX_SIZE})",
    )
    parser.add_argument(
        "--nodes",
        # an even count is refused by `Sizes`, which says why: an odd quorum
        type=_size(MAX_NODES, minimum=1, why="use 1, 3 or 5 Redis masters"),
        default=3,
        metavar="N",
        help=f"Redis masters, unused by the proxy variants (1, 3 or {MAX_NODES})",
    )
    parser.add_argument(
        "--ops",
        type=_size(MAX_SIZE, minimum=1, why="the model is sized for 1 to 3 acquisitions per client"),
        default=1,
        help=f"acquisitions per client; proxy variants: requests per client (1 to {MAX_SIZE})",
    )
    parser.add_argument(
        "--pauses",
        type=_size(MAX_SIZE, minimum=0, why="the model is sized for 0 to 3 pauses"),
        default=1,
        help=f"times a whole TTL may pass; proxy variants: requests the gateway stops waiting for, "
        f"answered 504 and still delivered later (0 to {MAX_SIZE})",
    )
    parser.add_argument(
        "--node-faults",
        type=_size(MAX_SIZE, minimum=0, why="the model is sized for 0 to 3 node faults"),
        default=1,
        help=f"node restarts or clock jumps (token-regress: also token source restarts) (0 to {MAX_SIZE})",
    )
    parser.add_argument(
        "--max-depth",
        type=bounded(MAX_DEPTH),
        default=DEFAULT_MAX_DEPTH,
        metavar="D",
        help=f"pan -m (1 to {MAX_DEPTH})",
    )
    parser.add_argument(
        "--memory",
        type=bounded(MAX_MEMORY_MB, minimum=MIN_MEMORY_MB),
        default=DEFAULT_MEMORY_MB,
        metavar="MB",
        help=f"pan's -DMEMLIM ({MIN_MEMORY_MB} to {MAX_MEMORY_MB})",
    )


def _size(maximum: int, *, minimum: int, why: str) -> Callable[[str], int]:
    """`bounded`, its refusal followed by why the model stops there."""
    parse = bounded(maximum, minimum=minimum)

    def checked(text: str) -> int:
        try:
            return parse(text)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{exc} ({why})") from None

    return checked


def _names(table: Mapping[str, object], what: str) -> Callable[[str], str]:
    """An argument type that refuses unknown names as the command line is parsed, before any search."""

    def parse(text: str) -> str:
        try:
            pick(text, table, what)
        except ModelArgumentError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from exc
        return text

    return parse


Cache = dict[tuple[str, str, Sizes, int, int], CheckResult]


def run_checks(args: argparse.Namespace, cache: Cache | None = None) -> list[CheckResult]:
    """Search each selected (variant, property) its model has; `cache` reuses searches with equal bounds."""
    cache = {} if cache is None else cache
    sizes = Sizes(
        clients=args.clients, nodes=args.nodes, ops=args.ops, pauses=args.pauses, node_faults=args.node_faults
    )
    variants = pick(args.variant, VARIANTS, "variant")
    props = pick(args.property, PROPERTIES, "property")
    wanted = {v: applicable(v, props) for v in variants}  # each model has properties of its own
    if not any(wanted.values()):
        models = {VARIANTS[v].model for v in variants}
        theirs = [p for p, prop in PROPERTIES.items() if prop.model in models]
        raise ModelArgumentError(
            f"--property {args.property}: not a property of {', '.join(variants)}; "
            f"theirs: {', '.join(theirs)}"
        )

    def key(variant: str, prop: str) -> tuple[str, str, Sizes, int, int]:
        return (variant, prop, sizes, args.max_depth, args.memory)

    for variant in variants:
        missing = [p for p in wanted[variant] if key(variant, p) not in cache]
        if not missing:
            continue
        log.info("searching %s: %s", variant, ", ".join(missing))  # progress on stderr, also with --json
        for result in check_variant(
            variant, missing, sizes, max_depth=args.max_depth, memory_mb=args.memory,
            keep=getattr(args, "keep", None),
        ):  # fmt: skip
            log.info(
                "%s / %s: %s (%s states, depth %d, %.2f s)",
                variant, result.prop, result.verdict, f"{result.report.states:,}", result.report.depth,
                result.search_seconds,
            )  # fmt: skip
            cache[key(variant, result.prop)] = result
    return [cache[key(v, p)] for v in variants for p in wanted[v]]


def _write_histories(results: list[CheckResult], directory: Path) -> list[Path]:
    """Each counterexample as a lab history file DIR/VARIANT-PROPERTY.jsonl."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in results:
        if r.trail is not None:
            path = directory / f"{r.variant}-{r.prop}.jsonl"
            path.write_text("".join(json.dumps(line) + "\n" for line in history_lines(r)))
            paths.append(path)
    return paths


def _draw(results: list[CheckResult], report: Path | None, svg: Path | None) -> None:
    """Each counterexample drawn as the lab draws a run: in one HTML report, or one .svg file each."""
    with tempfile.TemporaryDirectory(prefix="fencegate-model-") as tmp:
        paths = _write_histories(results, Path(tmp))
        runs = [RunResult.of(History.load(path)) for path in paths]
    if report is not None:
        write_html(runs, report, title="fencegate model: counterexamples")
        print(f"report: {report}", file=sys.stderr)
    if svg is not None:
        for path, run in zip(paths, runs, strict=True):
            write_svg(run, svg / f"model-{path.stem}.svg")


def _check(args: argparse.Namespace) -> int:
    results = run_checks(args)
    if args.history_dir is not None:
        _write_histories(results, args.history_dir)
    if args.report is not None or args.svg is not None:
        _draw(results, args.report, args.svg)
    if args.json:
        print(json.dumps(as_json(results), indent=2))
    elif args.markdown:
        print(markdown_table(results))
    else:
        print(text_table(results))
    if args.trails and not args.json and any(r.trail for r in results):
        print()
        print(trail_tables(results, markdown=args.markdown))
    return exit_code(results)


def exit_code(results: list[CheckResult]) -> int:
    if any(r.verdict == "violated" and r.promised and VARIANTS[r.variant].shipped for r in results):
        return 1
    if any(r.verdict == "incomplete" for r in results):
        return INCOMPLETE
    return 0


def render_block(argv: list[str], cache: Cache | None = None) -> str:
    """The Markdown for the arguments recorded in a doc marker (`--trails`: the timelines instead)."""
    parser = argparse.ArgumentParser(prog="fencegate model check", add_help=False)
    add_check_arguments(parser)
    parser.add_argument("--trails", action="store_true")
    args = parser.parse_args(argv)
    results = run_checks(args, cache)
    if args.trails:
        return trail_tables(results, markdown=True)
    return markdown_table(results)


def quick(argv: list[str]) -> bool:
    """A block cheap enough for CI: 2 clients, one acquisition each (larger ones take minutes)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--ops", type=int, default=1)
    known, _ = parser.parse_known_args(argv)
    return bool(known.clients <= 2 and known.ops <= 1)


def _doc(args: argparse.Namespace) -> int:
    try:
        text = args.path.read_text()
    except OSError as exc:
        raise ModelArgumentError(f"cannot read {args.path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ModelArgumentError(
            f"{args.path} is not UTF-8 text (byte {exc.start}: {exc.reason}); give the Markdown page with "
            f"the model tables (default: {DEFAULT_DOC})"
        ) from exc
    if not block_args(text):  # nothing to check or regenerate: a wrong file, not a doc that is current
        raise ModelArgumentError(
            f"{args.path} has no model-table markers (`<!-- model-table: ARGS -->`); give the Markdown page "
            f"with the model tables (default: {DEFAULT_DOC})"
        )
    cache: Cache = {}  # blocks that share a configuration search it once
    fresh = regenerate(
        text, lambda argv: render_block(argv, cache), only=quick if args.quick else lambda _: True
    )
    if args.check:
        if fresh != text:
            print(
                f"{args.path}: a table differs from a fresh run; run `fencegate model doc`", file=sys.stderr
            )
            return 1
        return 0
    if fresh != text:
        args.path.write_text(fresh)
    return 0


__all__ = ["Cache", "add_check_arguments", "configure", "exit_code", "quick", "render_block", "run_checks"]
