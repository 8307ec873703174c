"""What every token source shares: `async with`, and foreign errors translated at the boundary."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qsl

from lockclient.config import check_resource  # one check for every entry point that takes a resource
from lockclient.errors import ConfigurationError, MissingExtra, TokenSourceError

__all__ = ["ClosingSource", "check_resource", "check_seconds", "map_errors", "missing_extra", "query_options"]

BOOLEANS = {"true": True, "1": True, "yes": True, "on": True}
BOOLEANS |= {"false": False, "0": False, "no": False, "off": False}


def missing_extra(source: str, extra: str, exc: ImportError) -> MissingExtra:
    """The error for a source whose driver is not installed: it says which extra installs it."""
    package = exc.name.partition(".")[0] if exc.name else None
    return MissingExtra(
        f"{source} tokens need the {package or str(exc)!r} package, which is not installed: "
        f"pip install 'fencegate[{extra}]'",
        extra=extra,
        package=package,
    )


def query_options(
    query: str, *, scheme: str, flags: Sequence[str], files: Sequence[str], note: str = ""
) -> dict[str, Any]:
    """A source URL's query as its keywords: `flags` are booleans, `files` paths; anything else, or a
    name given twice, is a `ConfigurationError` listing the names there are (and `note`)."""
    options: dict[str, Any] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in options:
            raise ConfigurationError(f"the URL sets {name} twice")
        if name in flags:
            if value.lower() not in BOOLEANS:
                raise ConfigurationError(f"{name}={value!r} is not a boolean: use true or false")
            options[name] = BOOLEANS[value.lower()]
        elif name in files:
            options[name] = value
        else:
            article = "an" if scheme[0] in "aeiou" else "a"
            names = ", ".join([*flags, *files])
            raise ConfigurationError(
                f"{name!r} is not {article} {scheme}:// URL parameter: use {names}{note}"
            )
    return options


def check_seconds(**settings: float) -> None:
    """Every timeout a source is given must be a positive number of seconds."""
    bad = {name: value for name, value in settings.items() if not value > 0}
    if bad:
        listed = ", ".join(f"{name}={value!r}" for name, value in bad.items())
        raise ConfigurationError(f"timeouts must be positive seconds, got {listed}")


@contextlib.contextmanager
def map_errors(source: str, doing: str, *errors: type[BaseException], fix: str) -> Iterator[None]:
    """Turn a driver's errors into `TokenSourceError`; the message says what failed and what to check."""
    try:
        yield
    except errors as exc:
        detail = str(exc) or type(exc).__name__
        message = f"{source} token source could not {doing}: {detail}; {fix}"
        raise TokenSourceError(message, source=source) from exc


class ClosingSource:
    """`async with source:` closes it on the way out; subclasses define `aclose`."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
