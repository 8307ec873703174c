"""Which event loop `fencegate serve` runs on: uvloop unless told otherwise.

Why: under load the gateway is bound by the CPU of its one loop thread, where
HTTP parsing and the group commit's statements share the time. uvloop's loop
and transports are written in C and take less of it per request (in
`fencegate bench` about 10-15% more fenced PUTs per second on SQLite).
`--event-loop asyncio` keeps the standard loop: for a platform without
uvloop, or to rule the loop out when debugging.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from gateway.errors import BadSetting

__all__ = ["EVENT_LOOPS", "runner"]

T = TypeVar("T")
EVENT_LOOPS = ("uvloop", "asyncio")


def runner(kind: str) -> Callable[[Coroutine[Any, Any, T]], T]:
    """`asyncio.run` for `kind` (one of `EVENT_LOOPS`, as `Settings` checked); found before any coroutine
    exists, so a missing uvloop leaves none behind."""
    if kind == "asyncio":
        return asyncio.run
    try:
        import uvloop  # only when chosen: the asyncio choice must work without it
    except ImportError as exc:
        raise BadSetting(
            "event_loop uvloop is not installed on this platform; pip install uvloop, "
            "or pass --event-loop asyncio"
        ) from exc
    return uvloop.run
