"""The gateway's error answers as the client's exceptions: the one status and code map of the client.

Each `error` code of the API (docs/gateway.md) becomes one `GatewayError`
subclass of `lockclient.errors`, carrying the HTTP `status` and the code;
the 409s and 422s that name fields (the mark, the bound, the other
resource) carry them as attributes. Any 5xx but 501 means the outcome is
unknown (`OutcomeUnknown`), never that the write happened.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from lockclient.errors import (
    BadRequest,
    BodyTimeout,
    Forbidden,
    GatewayError,
    IdempotencyKeyReused,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    ResourceMismatch,
    StaleToken,
    TokenFromTheFuture,
    TooManyRequests,
    Unauthorized,
)
from lockclient.wire import (
    IDEMPOTENCY_KEY_REUSED,
    RESOURCE_MISMATCH,
    STALE_TOKEN,
    TOKEN_FROM_THE_FUTURE,
    read_decimal,
)

__all__ = ["BY_CODE", "BY_STATUS", "error_for"]

# the answers whose class the status (or the code) alone decides; the 409s and 422s with fields are
# built in `error_for`; another 5xx (500 internal_error, 502, 503 and its codes, 504) is `OutcomeUnknown`
BY_STATUS: dict[int, type[GatewayError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: BadRequest,
    408: BodyTimeout,
    412: PreconditionFailed,
    413: BadRequest,
    428: BadRequest,
    501: BadRequest,
}
BY_CODE: dict[str | None, type[GatewayError]] = {IDEMPOTENCY_KEY_REUSED: IdempotencyKeyReused}


def error_for(request: str, status: int, headers: Mapping[str, str], body: bytes) -> GatewayError:
    """The exception for an answer of `status` >= 400 to `request` ("PUT /v1/objects/k")."""
    try:
        document = json.loads(body)
    except ValueError:
        document = {}
    if not isinstance(document, dict):
        document = {}
    code = document.get("error")
    detail = document.get("detail") or body[:200].decode(errors="replace")
    if status == 409 and code == STALE_TOKEN:
        return StaleToken(
            f"{request}: {detail}",
            resource=document["resource"],
            token=document["token"],
            highest=document["highest"],
        )
    message = f"{request}: {status} {code}: {detail}"
    if status == 409 and code == RESOURCE_MISMATCH:
        return ResourceMismatch(
            message,
            key=document["key"],
            resource=document["resource"],
            object_resource=document["object_resource"],
        )
    if status == 422 and code == TOKEN_FROM_THE_FUTURE:
        return TokenFromTheFuture(
            message, resource=document["resource"], token=document["token"], bound=document["bound"]
        )
    if status == 429:
        wait = read_decimal(headers.get("Retry-After", ""))
        return TooManyRequests(
            message, status=status, code=code, retry_after=None if wait is None else float(wait)
        )
    if status >= 500 and status != 501:
        return OutcomeUnknown(f"{message}; the outcome is unknown", status=status, code=code)
    kind = BY_CODE.get(code) or BY_STATUS.get(status, GatewayError)
    return kind(message, status=status, code=code)
