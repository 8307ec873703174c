"""The small interfaces lockclient is built on.

`TokenSource` is the pluggable monotonic source of fencing tokens; `Fenced`
is what the gateway client needs from a lease; `Clock` lets tests and the
Redlock validity arithmetic share one notion of monotonic time.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class TokenSource(Protocol):
    """Issues strictly increasing integers in 1..2**63-1.

    Tokens from one source never decrease, across client processes
    (invariant 5). `upper_bound(resource)` is >= every token the source has
    issued for `resource`; the gateway uses it to refuse tokens from the future.
    """

    async def next_token(self, resource: str) -> int: ...

    async def upper_bound(self, resource: str) -> int: ...

    async def aclose(self) -> None: ...


class Fenced(Protocol):
    """Anything that carries a fencing token for a resource (a lease)."""

    @property
    def token(self) -> int: ...

    @property
    def resource(self) -> str: ...


class Clock(Protocol):
    """Monotonic seconds; the default is the running loop's `time()`."""

    def __call__(self) -> float: ...
