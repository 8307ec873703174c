"""Is the token source answering? Asked by `/readyz` and once at start-up.

A gateway with a token source needs it for every token above a cached bound:
with the source unreachable, such a write waits for the source's own timeout
and is answered 503. So the gateway is not ready while the source does not
answer a read (`upper_bound` of a fixed name: no side effect on any source)
within `READY_DEADLINE`, and a load balancer sends the writes elsewhere.

`Readiness` remembers what the last probe found, so the log says once when
the gateway is ready again; each failing probe is logged as a refusal.
"""

from __future__ import annotations

import logging
import time

from gateway.errors import Unavailable
from gateway.fencing import bound_within
from lockclient.errors import LockClientError
from lockclient.protocols import TokenSource

READY_DEADLINE = 2.0  # seconds the source has to answer a readiness read; probes run every few seconds
PROBE_RESOURCE = "fencegate-readiness"  # read, never drawn: asking for its bound changes nothing

log = logging.getLogger(__name__)


class Readiness:
    """Since when the probes have found the gateway not ready (None: the last one found it ready)."""

    def __init__(self) -> None:
        self.down_since: float | None = None

    def failed(self) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()

    def passed(self) -> None:
        if self.down_since is not None:
            log.info("ready again after %.1f s of failing probes", time.monotonic() - self.down_since)
            self.down_since = None


async def check_token_source(tokens: TokenSource) -> None:
    """Return once the source answered a read; 503 `token_source_unavailable` otherwise."""
    try:
        await bound_within(tokens, PROBE_RESOURCE, READY_DEADLINE)
    except (LockClientError, OSError, TimeoutError) as exc:
        raise Unavailable(
            f"the token source {tokens!r} did not answer a read within {READY_DEADLINE}s: {exc!r}",
            code="token_source_unavailable",
        ) from exc
