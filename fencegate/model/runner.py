"""Run spin on a model (fencegate.pml, proxy.pml): generate the verifier, compile it, search, replay a trail.

Every search is exhaustive: `-DSAFETY` (only safety properties are asked, so
no cycle detection is compiled in), `-DCOLLAPSE` (lossless state compression:
it saves memory and never drops a state) and never `-DBITSTATE` or hash
compaction, which could miss states and would turn a proof into a sample.
The variant is compiled once; each property (an ltl block of the model) is
then searched on its own with `./pan -N`, so one property's counterexample
never ends the search for another. Each ltl formula is an invariant `[] p`,
which spin turns into a claim that asserts p after every step: a safety
check, complete under -DSAFETY (pan's warning about accept labels concerns
liveness, which no property here needs). Work happens in a temporary directory that is
removed afterwards, unless the caller passes a directory to keep.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fencegate.model.errors import (
    BuildError,
    ModelArgumentError,
    SearchError,
    ToolMissing,
    TrailError,
)
from fencegate.model.pan import PanReport, parse_pan
from fencegate.model.trail import Trail, parse_replay
from fencegate.model.variants import LOCK_MODEL, PROPERTIES, VARIANTS, Sizes

DEFAULT_MAX_DEPTH = 10_000  # pan's -m; the small configurations stay under 300
DEFAULT_MEMORY_MB = 4096  # -DMEMLIM: a search that needs more is reported incomplete
CFLAGS = ("-O2", "-w", "-DSAFETY", "-DCOLLAPSE")  # -w: pan.c trips gcc's array-bound heuristics
BUILD_TIMEOUT = 300.0


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one property on one variant, with the search's numbers."""

    variant: str
    prop: str
    sizes: Sizes
    verdict: str  # "holds" | "violated" | "incomplete"
    report: PanReport
    build_seconds: float  # spin -a and gcc, shared by the variant's properties
    search_seconds: float  # ./pan, wall clock
    trail: Trail | None  # the replayed counterexample when violated

    @property
    def promised(self) -> bool:
        return PROPERTIES[self.prop].promised


def model_source(model: str = LOCK_MODEL) -> str:
    """The Promela text of one model shipped in this package."""
    return resources.files("fencegate.model").joinpath(model).read_text()


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ToolMissing(
            f"`{name}` is not on PATH: run scripts/install-servers.sh (Debian packages spin and gcc)",
            tool=name,
        )
    return path


def macros(variant: str, sizes: Sizes) -> list[str]:
    if variant not in VARIANTS:
        raise ModelArgumentError(f"unknown variant {variant!r}: choose from {', '.join(VARIANTS)}")
    return [f"-D{VARIANTS[variant].macro}", *sizes.macros()]


def check_variant(
    variant: str,
    props: Sequence[str],
    sizes: Sizes,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    memory_mb: int = DEFAULT_MEMORY_MB,
    keep: Path | None = None,
    timeout: float | None = None,
) -> list[CheckResult]:
    """Build the verifier for one variant once, then search every state once per property."""
    unknown = [p for p in props if p not in PROPERTIES]
    if unknown:
        raise ModelArgumentError(f"unknown properties {unknown}: choose from {', '.join(PROPERTIES)}")
    defines = macros(variant, sizes)
    model = VARIANTS[variant].model
    foreign = [p for p in props if PROPERTIES[p].model != model]
    if foreign:
        raise ModelArgumentError(f"{', '.join(foreign)}: not a property of {variant}'s model ({model})")
    results = []
    with _workdir(keep, variant) as work:
        (work / model).write_text(model_source(model))
        started = time.monotonic()
        _run([tool("spin"), "-a", *defines, model], work, "spin -a rejected the model")
        _run(
            [tool("gcc"), *CFLAGS, f"-DMEMLIM={memory_mb}", "-o", "pan", "pan.c"],
            work,
            "gcc could not compile the verifier spin generated",
        )
        build_seconds = time.monotonic() - started
        for prop in props:
            claim = PROPERTIES[prop].claim
            (work / f"{model}.trail").unlink(missing_ok=True)
            started = time.monotonic()
            try:
                pan = subprocess.run(
                    ["./pan", f"-m{max_depth}", "-N", claim],
                    cwd=work, capture_output=True, text=True, timeout=timeout,
                )  # fmt: skip
            except subprocess.TimeoutExpired as exc:
                raise SearchError(
                    f"./pan ran past {timeout} s: shrink the configuration or raise the timeout", output=""
                ) from exc
            search_seconds = time.monotonic() - started
            (work / f"pan-{claim}.out").write_text(pan.stdout + pan.stderr)
            report = parse_pan(pan.stdout)
            trail = None
            if report.errors:
                trail = _replay(work, model, defines)
                verdict = "violated"
            else:
                verdict = "holds" if report.complete else "incomplete"
            results.append(
                CheckResult(variant, prop, sizes, verdict, report, build_seconds, search_seconds, trail)
            )
    return results


def check(variant: str, prop: str, sizes: Sizes, **options: Any) -> CheckResult:
    """One property of one variant (see `check_variant` for the options)."""
    return check_variant(variant, [prop], sizes, **options)[0]


def _replay(work: Path, model: str, defines: list[str]) -> Trail:
    if not (work / f"{model}.trail").exists():
        raise TrailError(f"pan reported an error but wrote no trail in {work}")
    out = subprocess.run(
        [tool("spin"), "-t", "-p", *defines, model],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    if out.returncode != 0:
        raise TrailError(f"spin -t could not replay the trail:\n{out.stdout}{out.stderr}")
    return parse_replay(out.stdout)


def _run(argv: list[str], cwd: Path, what: str) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    if done.returncode != 0:
        raise BuildError(what, command=" ".join(argv), output=done.stdout + done.stderr)


@contextmanager
def _workdir(keep: Path | None, name: str) -> Iterator[Path]:
    if keep is not None:
        path = keep / name
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="fencegate-model-") as tmp:
        yield Path(tmp)


__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MEMORY_MB",
    "CheckResult",
    "check",
    "check_variant",
    "macros",
    "model_source",
]
