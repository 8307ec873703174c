"""How the text of a flag or an environment variable becomes a setting, by the setting's type.

One table (`PARSERS`) serves both sources, so a bad value gets the same
message from either; `gateway.settings_cli` adds the setting's name and fix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gateway.durations import Duration, parse_duration

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


class OutOfRange(ValueError):
    """A whole number too long for `int()` to read (Python stops at 4,300 digits): no setting takes it."""


Parse = Callable[[str], object]


def _whole_number(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        if raw.strip().lstrip("+-").isdigit():
            raise OutOfRange("is out of range") from None
        raise ValueError("is not a whole number") from None


def _number(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError("is not a number") from None


def _yes_no(raw: str) -> bool:
    if raw.lower() not in _TRUE + _FALSE:
        raise ValueError("is not a yes/no value; give 1 or 0")
    return raw.lower() in _TRUE


# How a flag's or a variable's text becomes a setting, by the setting's type: the one table for both.
PARSERS: dict[type, Parse] = {
    int: _whole_number,
    float: _number,
    bool: _yes_no,
    Path: Path,
    str: str,
    Duration: parse_duration,
}
# a str setting's flag shows its own name
METAVARS = {int: "N", float: "SECONDS", Path: "PATH", Duration: "DURATION"}
