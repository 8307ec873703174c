"""The `Fencing-Token` header: the lease a request writes under, read once its caller is authorized.

A token is a decimal integer in 1..2**63-1 (the signed 64-bit range of the
BIGINT mark), written without sign, spaces or leading zeros, so one token has
one spelling. Its digits are read by the wire's one rule for integers
(`lockclient.wire.parse_decimal`), which takes ASCII digits only and bounds
their number before converting: `str.isdigit()` and `int()` take any script's
digits, and `int()` gives up past 4300 of them. The same rule reads a token an
upstream states (`token_or_none`): the gateway passes on only what it would
accept from a client.

The view reads the token after `Credentials.authorize`, so a caller without
access learns nothing about tokens (docs/security.md); the header's one-value
check comes earlier, with the other headers (`gateway.parsing.read_fenced`).
"""

from __future__ import annotations

from gateway.errors import MalformedRequest, TokenRequired
from gateway.parsing import LIST_HINT
from lockclient.wire import MAX_TOKEN, parse_decimal

TOKEN_RULE = f"is not a decimal integer in 1..{MAX_TOKEN} (no sign, spaces or leading zeros)"


def parse_token(raw: str | None, *, required: bool) -> int | None:
    """The token of a `Fencing-Token` header; 428 if a write has none, 400 if malformed."""
    if raw is None:
        if required:
            raise TokenRequired(
                "this request changes storage and needs a `Fencing-Token` header: take the lock and send "
                "its token"
            )
        return None
    token = parse_decimal(raw, low=1, high=MAX_TOKEN)
    if token is not None:
        return token
    rule = f"is a list; {LIST_HINT}" if "," in raw else TOKEN_RULE
    raise MalformedRequest(f"Fencing-Token {raw[:40]!r} {rule}")


def token_or_none(raw: str | None) -> int | None:
    """The token of a header if it is well formed (as `TOKEN_PATTERN` states), else None."""
    return None if raw is None else parse_decimal(raw, low=1, high=MAX_TOKEN)
