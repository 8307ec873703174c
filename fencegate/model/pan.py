"""Reading what ./pan prints: the numbers of a search and the errors it met.

pan's report is stable text (spin 6); the parser takes only the lines it
needs and refuses output that has none of them, so a changed format fails
loudly instead of reporting an empty search as a proof.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fencegate.model.errors import SearchError

_VECTOR = re.compile(r"State-vector (\d+) byte, depth reached (\d+), errors: (\d+)")
# pan prints counts of 1e8 and more in exponent form ("1.2087011e+08 states, stored")
_COUNT = r"(\d+(?:\.\d+)?(?:e\+\d+)?)"
_STORED = re.compile(rf"^\s*{_COUNT} states, stored", re.M)
_TRANSITIONS = re.compile(rf"^\s*{_COUNT} transitions", re.M)
_MEMORY = re.compile(r"^\s*([\d.]+)\s+total actual memory usage", re.M)
_ELAPSED = re.compile(r"pan: elapsed time ([\d.e+-]+) seconds")
_ERROR = re.compile(r"^pan:\d+: (.*?)(?: \(at depth \d+\))?$", re.M)


@dataclass(frozen=True)
class PanReport:
    """One search: a proof when `errors == 0 and complete`."""

    states: int
    transitions: int
    depth: int
    errors: int
    memory_mb: float
    seconds: float
    vector_bytes: int
    complete: bool  # False when the depth or memory bound cut the search short
    first_error: str | None  # pan's message for the first error, e.g. "assertion violated (...)"
    limit: str | None  # why the search is incomplete


def parse_pan(text: str) -> PanReport:
    vector = _VECTOR.search(text)
    stored = _STORED.search(text)
    if vector is None or stored is None:
        raise SearchError("./pan printed no search summary (did it crash or run out of memory?)", output=text)
    limit = None
    if "max search depth too small" in text:
        limit = "depth bound reached: raise --max-depth"
    elif "reached -DMEMLIM bound" in text or "out of memory" in text:
        limit = "memory bound reached: raise --memory or shrink the configuration"
    transitions = _TRANSITIONS.search(text)
    memory = _MEMORY.search(text)
    elapsed = _ELAPSED.search(text)
    error = _ERROR.search(text)
    return PanReport(
        states=round(float(stored.group(1))),
        transitions=round(float(transitions.group(1))) if transitions else 0,
        depth=int(vector.group(2)),
        errors=int(vector.group(3)),
        memory_mb=float(memory.group(1)) if memory else 0.0,
        seconds=float(elapsed.group(1)) if elapsed else 0.0,
        vector_bytes=int(vector.group(1)),
        complete=limit is None,
        first_error=error.group(1) if error else None,
        limit=limit,
    )


__all__ = ["PanReport", "parse_pan"]
