"""Every error the gateway server raises; each refusal knows its HTTP answer.

GatewayServerError
 ├── BadSetting (ValueError) bad settings; the message says the fix
 ├── CannotListen                 the address or port cannot be served (in use, not this machine's)
 └── Refusal                      a request answered with an error: status, `error` code, JSON fields
      ├── MalformedRequest               400 bad_request: malformed token, resource or key
      ├── NotAuthenticated             401 unauthorized: no or unknown API key
      ├── OutOfScope               403 forbidden: the key is not scoped to this resource or key
      ├── HiddenBinding            409 resource_mismatch: the key belongs to a resource outside the
      │                            caller's scope, which the answer does not name
      ├── PreconditionNotMet       412 precondition_failed: the client's If-Match / If-None-Match does
      │                            not hold for the key's current version
      ├── PayloadTooLarge          413 payload_too_large
      ├── TokenAboveBound          422 token_from_the_future: above the source's upper bound
      ├── RequestTimeout           408 body_timeout: the client sent its body too slowly
      ├── TokenRequired            428 token_required: a write without Fencing-Token
      ├── OverClientLimit          429 too_many_requests: the client has too many requests in flight
      ├── NotSupported             501 not_supported: not available in this mode
      │    └── PreconditionNotSupported 501 precondition_not_supported: If-Match on a store that
      │                                 cannot check it
      ├── UpstreamFailed           502 upstream_failed: the upstream answered an error, or a token
      │                            the gateway would not accept from a client
      ├── Unavailable              503: storage, token source or upstream unreachable, or the
      │                            source went back below a mark (token_source_regressed)
      └── UpstreamTimeout          504 upstream_timeout: the upstream did not answer in time

A token below the mark (`storage.errors.BelowMark`) and a reused Idempotency-Key
(`storage.errors.IdempotencyKeyConflict`) are storage's errors, answered 409 and 422 by the middleware.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Mapping
from typing import ClassVar


class GatewayServerError(Exception):
    """Root of every gateway server error."""


class BadSetting(GatewayServerError, ValueError):
    """A setting is invalid; the message says how to fix it."""


class CannotListen(GatewayServerError):
    """`fencegate serve` could not listen where it was told; the message names the cause and the fix."""

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        super().__init__(f"cannot listen on {host}:{port}: {_listen_hint(host, cause)}")
        self.host = host
        self.port = port


def _listen_hint(host: str, cause: OSError) -> str:
    if isinstance(cause, socket.gaierror):
        return f"{host!r} is not an address or a name this machine can resolve"
    if cause.errno == errno.EADDRINUSE:
        return (
            "the port is in use (another gateway?); stop that process, or pick another --port (0: a free one)"
        )
    if cause.errno == errno.EADDRNOTAVAIL:
        return f"this machine has no address {host}; give one of its own, or 0.0.0.0 for all of them"
    if cause.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges); pick a port above 1023"
    return cause.strerror or str(cause)


class Refusal(GatewayServerError):
    """A request the gateway answers with an error; nothing was written."""

    status: ClassVar[int] = 500
    default_code: ClassVar[str] = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, fields: Mapping[str, object] | None = None):
        super().__init__(message)
        self.code = code or self.default_code
        self.fields = dict(fields or {})

    def body(self) -> dict[str, object]:
        """The JSON body: the `error` code, the fields, and the message as `detail`."""
        return {"error": self.code, **self.fields, "detail": str(self)}


class MalformedRequest(Refusal):
    status, default_code = 400, "bad_request"


class NotAuthenticated(Refusal):
    status, default_code = 401, "unauthorized"


class OutOfScope(Refusal):
    status, default_code = 403, "forbidden"


class HiddenBinding(Refusal):
    """The key belongs to another resource, one the caller's API key does not cover: the answer has the
    shape of `storage.ResourceMismatch`'s (docs/security.md) with `object_resource` null."""

    status, default_code = 409, "resource_mismatch"


class PreconditionNotMet(Refusal):
    status, default_code = 412, "precondition_failed"


class PayloadTooLarge(Refusal):
    status, default_code = 413, "payload_too_large"


class TokenAboveBound(Refusal):
    status, default_code = 422, "token_from_the_future"


class RequestTimeout(Refusal):
    status, default_code = 408, "body_timeout"


class TokenRequired(Refusal):
    status, default_code = 428, "token_required"


class OverClientLimit(Refusal):
    status, default_code = 429, "too_many_requests"


class NotSupported(Refusal):
    status, default_code = 501, "not_supported"


class PreconditionNotSupported(NotSupported):
    """If-Match / If-None-Match on a write to a store that would not check it."""

    default_code = "precondition_not_supported"


class UpstreamFailed(Refusal):
    status, default_code = 502, "upstream_failed"


class Unavailable(Refusal):
    status, default_code = 503, "unavailable"


class UpstreamTimeout(Refusal):
    status, default_code = 504, "upstream_timeout"
