"""`GatewayRetry`: how the gateway client sends again a request whose outcome is unknown.

A write is sent again only with its `Idempotency-Key`, so the gateway applies
it at most once; when the sends run out, `gave_up` words the `OutcomeUnknown`
that carries the key for a later retry.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from lockclient.errors import ConfigurationError, OutcomeUnknown

__all__ = ["DEFAULT_GATEWAY_RETRY", "GatewayRetry", "gave_up"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayRetry:
    """How `GatewayClient` sends a request again whose outcome is unknown (a 5xx but 501, a
    timeout, a dropped connection) or that could not connect (nothing was sent).

    attempts: sends in all, the first included (1: never again).
    delay, max_delay, jitter: the pause before the n-th retry is
        `min(delay * 2**(n-1), max_delay) + uniform(0, jitter)` seconds.

    A write is retried with its `Idempotency-Key` only, so it is applied at
    most once. An answer of the API (a 4xx: stale, mismatch, not found, ...)
    is never retried, nor a TLS failure. Each send has the client's `timeout`.
    """

    attempts: int = 4
    delay: float = 0.1
    max_delay: float = 2.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigurationError(
                f"GatewayRetry.attempts must be an int >= 1, got {self.attempts!r}: use 1 to send once"
            )
        for name in ("delay", "max_delay", "jitter"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigurationError(f"GatewayRetry.{name} must be a finite number >= 0, got {value!r}")

    def backoff(self, retry: int) -> float:
        """The pause before retry number `retry` + 1."""
        return min(self.delay * 2.0 ** min(retry, 30), self.max_delay) + random.random() * self.jitter


DEFAULT_GATEWAY_RETRY = GatewayRetry()


def gave_up(
    unknown: OutcomeUnknown, key: str | None, attempts: int, why: str, *, write: bool
) -> OutcomeUnknown:
    """The error after the last send of a request whose outcome stayed unknown."""
    if not write:
        again = "a read changes nothing: send it again"
    elif key is not None:
        again = f"send it again with idempotency_key={key!r}: it is applied at most once"
    else:
        again = "no Idempotency-Key was sent: read the object before sending a write again"
    return OutcomeUnknown(
        f"{unknown} (sent {attempts} time(s); {why}): {again}",
        status=unknown.status,
        code=unknown.code,
        idempotency_key=key,
        attempts=attempts,
    )
