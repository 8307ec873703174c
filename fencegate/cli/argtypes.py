"""Argument types: a value the command could not use is refused as it is parsed, before anything starts.

The refusal is the parser's one line (`fencegate lab run: argument --ops: 0:
give 1 or more`) with exit code 2. Counts and durations are bounded, since a
number past what this machine could run would start work that never ends
(and hold every server it started); output paths are tried for writing, so a
long run is not lost at its end to a path it cannot write.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path


def bounded(maximum: int, *, minimum: int = 1) -> Callable[[str], int]:
    """A count from `minimum` to `maximum`: of processes, servers or steps, where a number past what
    this machine could run would start work that never ends (and hold every server it started). Say
    the bound in the option's help: `(1 to 64)`."""

    def parse(text: str) -> int:
        return _whole_number(text, minimum=minimum, maximum=maximum)

    parse.__name__ = f"count from {minimum} to {maximum}"
    return parse


def _whole_number(text: str, *, minimum: int, maximum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value}: give {minimum} or more")
    if maximum is not None and value > maximum:
        raise argparse.ArgumentTypeError(f"{value}: give at most {maximum}")
    return value


def seconds_up_to(maximum: float, *, positive: bool = True) -> Callable[[str], float]:
    """A duration of at most `maximum` seconds (above 0, or 0 or more when not `positive`): for a run
    that holds servers until it ends, where `1e12` would never end. Say the bound in the option's help:
    `(above 0, at most 604800: a week)`."""

    def parse(text: str) -> float:
        value = _seconds(text, positive=positive)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{text}: give at most {maximum:g} seconds")
        return value

    parse.__name__ = f"seconds up to {maximum:g}"
    return parse


def _seconds(text: str, *, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
        raise argparse.ArgumentTypeError(
            f"{text}: give a number of seconds {'above 0' if positive else '(0 or more)'}"
        )
    return value


def output_dir(text: str) -> Path:
    """A directory a command writes into, made if missing. Checked as it is parsed, so a long run is not
    lost at its end to a path it cannot write; nothing is created."""
    path = Path(text)
    _check_writable_dir(path, given=path)
    return path


def output_file(text: str) -> Path:
    """A file a command writes, its directory made if missing; checked as `output_dir` is."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{path} is a directory; give a file name, e.g. {path / 'report.html'}"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{path} is not writable; give a file you can write")
    _check_writable_dir(path.parent, given=path)
    return path


def _check_writable_dir(path: Path, *, given: Path) -> None:
    """Refuse `path` unless it is a directory that can be written, or one that can be made."""
    existing = next((p for p in (path, *path.parents) if os.path.lexists(p)), Path("."))
    if not existing.is_dir():
        if existing == given:
            raise argparse.ArgumentTypeError(f"{given} is not a directory; give a new or existing directory")
        raise argparse.ArgumentTypeError(
            f"{given}: {existing} is not a directory; give a path under a directory"
        )
    # Tried for real: root passes every permission check, yet cannot write under /proc or a read-only mount.
    try:
        import tempfile  # random and shutil, for one probe: only once a path is given

        os.rmdir(tempfile.mkdtemp(prefix=".fencegate-probe-", dir=existing))
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"{given}: cannot create files in {existing} ({exc.strerror}); give a path under a directory "
            "you can write"
        ) from None
