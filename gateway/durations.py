"""Durations as an operator writes them (`30s`, `15m`, `24h`, `7d`): the one parser every policy uses.

A retention or an expiry of zero, of a negative or not-a-number length, or
without a unit is refused, never guessed at: a TTL read as `0` would forget
every Idempotency-Key at once, and a bare `24` could mean hours or seconds.
"""

from __future__ import annotations

import re

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Longer than any store lives; a cutoff this far back still fits Python's datetime (year 1 is the floor).
MAX_DAYS = 36_500
_FORM = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
USE = "give a positive number with a unit s, m, h or d (30s, 15m, 24h, 7d)"


class Duration(float):
    """A length of time in seconds, shown in the largest unit that writes it whole (`86400` is `24h`)."""

    def __str__(self) -> str:
        for unit, seconds in sorted(UNITS.items(), key=lambda item: -item[1]):
            if self >= seconds and float(self) % seconds == 0:
                return f"{int(self // seconds)}{unit}"
        return f"{float(self):g}s"

    __repr__ = __str__


def parse_duration(raw: str) -> Duration:
    """`raw` as a `Duration`; `ValueError` saying what is wrong (its text completes "'7x' ...")."""
    found = _FORM.fullmatch(raw.strip())
    if found is None:
        raise ValueError(f"is not a duration; {USE}")
    seconds = float(found[1]) * UNITS[found[2]]
    if seconds <= 0:
        raise ValueError(f"is not above zero; {USE}")
    if seconds > MAX_DAYS * UNITS["d"]:
        raise ValueError(f"is out of range; give at most {MAX_DAYS}d")
    return Duration(seconds)
