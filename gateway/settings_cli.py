"""The gateway's settings as flags and environment variables of the same names.

`--max-body` is also `FENCEGATE_MAX_BODY`, and so on; a flag given on the
command line wins over the environment (compose sets the environment). Each
flag, its variable and the conversion of their text follow from one field of
`Settings` (its type, default and help), so a new setting needs no code here.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, get_args, get_type_hints

from gateway.config import ENV_PREFIX, Settings
from gateway.errors import BadSetting
from gateway.settings_checks import short, too_big
from gateway.settings_parsers import METAVARS, PARSERS, OutOfRange


@dataclass(frozen=True)
class _Option:
    """One setting as the command line and the environment see it."""

    name: str
    kind: type
    default: object
    help: str
    most: int | None = None  # the largest value taken, for a whole number

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parse(self, raw: str, source: str) -> object:
        """`raw` as the setting; a bad value is repeated in the message cut to SHOWN characters."""
        try:
            value = PARSERS[self.kind](raw)
        except OutOfRange as exc:
            fix = f"; give at most {self.most}" if self.most is not None else ""
            raise BadSetting(f"{source} {short(raw.strip())!r} {exc}{fix}") from None
        except ValueError as exc:
            raise BadSetting(f"{source} {short(raw)!r} {exc}") from None
        if self.most is not None and isinstance(value, int) and value > self.most:
            raise BadSetting(f"{source} {short(raw.strip())!r} {too_big(self.most)}")
        return value


def options_of(settings: type[Any]) -> tuple[_Option, ...]:
    """Every field of a settings dataclass with its type resolved (`Path | None`: a Path that may be unset);
    a type without a parser fails here, at import, not when a user first sets it."""
    hints = get_type_hints(settings)
    options = []
    for f in fields(settings):
        kinds = [kind for kind in get_args(hints[f.name]) or (hints[f.name],) if kind is not type(None)]
        if len(kinds) != 1 or kinds[0] not in PARSERS:
            raise TypeError(
                f"{settings.__name__}.{f.name}: no parser for {hints[f.name]}; add one to PARSERS"
            )
        options.append(_Option(f.name, kinds[0], f.default, f.metadata["help"], f.metadata.get("most")))
    return tuple(options)


OPTIONS = options_of(Settings)


def env_name(name: str) -> str:
    """The environment variable of a setting: `max_body` is `FENCEGATE_MAX_BODY`."""
    return ENV_PREFIX + name.upper()


def _shown(default: object) -> str:
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "on" if default else "off"
    return str(default)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting (`--max-body`), each also read from `FENCEGATE_MAX_BODY`."""
    for option in OPTIONS:
        most = "" if option.most is None else f", at most {option.most}"
        text = f"{option.help}{most} (default: {_shown(option.default)}; env {env_name(option.name)})"
        text = text.replace("%", "%%")  # argparse formats help with %
        if option.kind is bool:
            parser.add_argument(option.flag, dest=option.name, action="store_const", const="1", help=text)
        else:
            metavar = METAVARS.get(option.kind, option.name.upper())
            parser.add_argument(option.flag, dest=option.name, metavar=metavar, help=text)


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Settings from parsed flags, falling back to the environment, then the defaults."""
    values: dict[str, object] = {}
    for option in OPTIONS:
        raw, source = getattr(args, option.name, None), option.flag
        if raw is None:
            raw, source = environ.get(env_name(option.name)) or None, env_name(option.name)
        if raw is not None:
            values[option.name] = option.parse(raw, source)
    return Settings(**values)  # type: ignore[arg-type]
