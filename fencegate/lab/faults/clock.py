"""Wall-clock jumps for one server process: the LD_PRELOAD clock shim and its control file.

`build_shim()` compiles lab/clockshim.c with gcc on first use into a cache
dir (keyed by the source's hash, so an edited shim is rebuilt, and renamed
into place so concurrent builders never load half a file). `ClockShift` owns
one control file: start a server with `shift.env()` in its environment, then
`shift.jump(120)` moves its wall clock two minutes ahead at once; monotonic
clocks are untouched. Redis expires keys by the wall clock, which is the
seed documents' point about clock jumps.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from fencegate.lab.errors import FaultError, ShimBuildError

SHIM_SOURCE = Path(__file__).resolve().parent.parent / "clockshim.c"
OFFSET_ENV = "FENCEGATE_CLOCK_OFFSET_FILE"
CACHE_ENV = "FENCEGATE_CACHE_DIR"
BUILD_TIMEOUT = 60.0


def cache_dir() -> Path:
    """$FENCEGATE_CACHE_DIR, else $XDG_CACHE_HOME/fencegate, else ~/.cache/fencegate."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fencegate"


def build_shim(cache: Path | None = None) -> Path:
    """The compiled shim (.so), built now if this version of the source was never built."""
    source = SHIM_SOURCE.read_bytes()
    target_dir = cache or cache_dir()
    target = target_dir / f"clockshim-{hashlib.sha256(source).hexdigest()[:16]}.so"
    if target.exists():
        return target
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ShimBuildError("gcc not found: install it with `apt-get install gcc` to build the clock shim")
    target_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".clockshim-", suffix=".so", dir=target_dir)
    os.close(fd)
    try:
        result = subprocess.run(
            [gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", tmp, str(SHIM_SOURCE), "-ldl"],
            capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise ShimBuildError(f"gcc could not build {SHIM_SOURCE}", output=result.stderr)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


class ClockShift:
    """One control file for the shim: the offset, in seconds, of every process started with `env()`."""

    def __init__(self, control: Path | str, *, shim: Path | None = None) -> None:
        self.control = Path(control)
        self._shim = shim
        self.jump(0.0)

    def env(self) -> dict[str, str]:
        """The environment that makes a server run on this shifted clock."""
        if self._shim is None:
            self._shim = build_shim()
        preload = " ".join(p for p in (str(self._shim), os.environ.get("LD_PRELOAD", "")) if p)
        return {"LD_PRELOAD": preload, OFFSET_ENV: str(self.control)}

    @property
    def offset(self) -> float:
        return float(self.control.read_text())

    def jump(self, seconds: float) -> None:
        """Set the offset from the real clock (not cumulative); replaced atomically."""
        if seconds != seconds or abs(seconds) > 10 * 365 * 86400:  # NaN, or further than the shim's range
            raise FaultError(f"clock offset {seconds!r} s is not a sane jump; use seconds within ten years")
        tmp = self.control.with_name(self.control.name + ".tmp")
        tmp.write_text(f"{seconds:.9f}\n")
        tmp.replace(self.control)
