"""Every error lockclient raises.

A gateway's answer becomes its class in one place (`lockclient.http_errors`);
each `GatewayError` carries the HTTP `status` and the API's `error` code.

LockClientError
 ├── ConfigurationError (ValueError)   bad arguments; the message says the fix
 ├── LockNotAcquired (TimeoutError)    no quorum in time; per-node reasons attached
 │    └── QuorumUnavailable            a majority of masters did not answer (down, refused, timed out)
 ├── LockLost                          the lease expired or was taken away
 ├── ExtensionLimitReached             a lease was extended as often as allowed
 ├── TokenSourceError                  the token source failed or is unreachable
 ├── TLSError (ConnectionError)        a TLS connection failed; says why (CA, host name, client certificate)
 ├── MissingExtra (ImportError)        a token source's driver is not installed; names the extra
 └── GatewayError                      the gateway answered with an error, or could not be asked
      ├── BadRequest (ValueError)      400, 405, 413, 428, 501: the request is wrong; nothing changed
      ├── BodyTimeout                  408: the body did not arrive in time; nothing changed
      ├── Unauthorized                 401: no or an unknown API key
      ├── Forbidden                    403: the key is not scoped to this resource or key
      ├── NotFound (LookupError)       404: no such object (a fenced read still raised the mark)
      ├── StaleToken                   409 stale_token: a newer token has already written
      ├── ResourceMismatch             409 resource_mismatch: the key belongs to another resource
      ├── PreconditionFailed           412 precondition_failed: the object is no longer the version
      │                                `if_match` named; nothing changed: read it again
      ├── TokenFromTheFuture           422 token_from_the_future: above what the source issued
      ├── IdempotencyKeyReused         422 idempotency_key_reused: the key stands for another request
      ├── TooManyRequests              429: too many requests of this client in flight; nothing changed
      └── OutcomeUnknown               5xx but 501, a timeout or a dropped connection: the write may or
                                       may not have happened; carries the Idempotency-Key to retry with
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class LockClientError(Exception):
    """Root of every lockclient error."""


class ConfigurationError(LockClientError, ValueError):
    """An argument is invalid; the message says how to fix it."""


class LockNotAcquired(LockClientError, TimeoutError):
    """No quorum was reached within the attempts or the deadline."""

    def __init__(self, message: str, *, resource: str, reasons: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.resource = resource
        self.reasons = dict(reasons or {})


class QuorumUnavailable(LockNotAcquired):
    """A majority of masters did not answer (refused, reset, timed out, or an error reply):
    an outage, not contention. `unreachable` lists those masters."""

    def __init__(
        self,
        message: str,
        *,
        resource: str,
        unreachable: Sequence[str],
        reasons: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, resource=resource, reasons=reasons)
        self.unreachable = tuple(unreachable)


class LockLost(LockClientError):
    """The lease is no longer held (expired, taken, or a renewal failed)."""

    def __init__(self, message: str, *, resource: str, token: int | None = None) -> None:
        super().__init__(message)
        self.resource = resource
        self.token = token


class ExtensionLimitReached(LockClientError):
    """`extend` was refused locally: the lease already used every extension allowed."""

    def __init__(self, message: str, *, resource: str, limit: int) -> None:
        super().__init__(message)
        self.resource = resource
        self.limit = limit


class TokenSourceError(LockClientError):
    """The token source could not issue or bound a token."""

    def __init__(self, message: str, *, source: str) -> None:
        super().__init__(message)
        self.source = source


class TLSError(LockClientError, ConnectionError):
    """A TLS connection to `server` could not be made; the message says why and what to change.

    It is a `ConnectionError`, so a driver that retries socket errors (kazoo) or
    a caller that maps them (storage) treats it as the server being unreachable:
    never as a reason to try plaintext.
    """

    def __init__(self, message: str, *, server: str) -> None:
        super().__init__(message)
        self.server = server


class MissingExtra(LockClientError, ImportError):
    """A token source needs a driver that is not installed; the message names the extra to install."""

    def __init__(self, message: str, *, extra: str, package: str | None) -> None:
        super().__init__(message, name=package)
        self.extra = extra


class GatewayError(LockClientError):
    """The gateway refused a request or could not be reached."""

    def __init__(self, message: str, *, status: int | None, code: str | None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class BadRequest(GatewayError, ValueError):
    """The request is malformed or not allowed here; nothing changed. Fix it rather than retry."""


class Unauthorized(GatewayError):
    """401: the gateway needs an API key and got none or an unknown one."""


class Forbidden(GatewayError):
    """403: the API key is not allowed on this resource, key or prefix (or is read-only)."""


class NotFound(GatewayError, LookupError):
    """404: no such object. A fenced read of a missing key still raised the resource's mark."""


class StaleToken(GatewayError):
    """409: the resource's mark is above this token; the write changed nothing."""

    def __init__(self, message: str, *, resource: str, token: int, highest: int) -> None:
        super().__init__(message, status=409, code="stale_token")
        self.resource = resource
        self.token = token
        self.highest = highest


class ResourceMismatch(GatewayError):
    """409: the key belongs to `object_resource` and the request named `resource`; nothing changed.

    `object_resource` is None when the gateway does not name it: it lies
    outside the scope of the caller's API key (docs/security.md).

    A key is fenced by the mark of the resource it was first written under, for
    good: send that resource's lease.
    """

    def __init__(self, message: str, *, key: str, resource: str, object_resource: str | None) -> None:
        super().__init__(message, status=409, code="resource_mismatch")
        self.key = key
        self.resource = resource
        self.object_resource = object_resource


class PreconditionFailed(GatewayError):
    """412: the object's current version is not the one the write's `if_match` named (another write
    landed since the read it came from); nothing changed. Read again, recompute, write again."""


class TokenFromTheFuture(GatewayError):
    """422: the token is above anything the gateway's token source has issued for the resource."""

    def __init__(self, message: str, *, resource: str, token: int, bound: int) -> None:
        super().__init__(message, status=422, code="token_from_the_future")
        self.resource = resource
        self.token = token
        self.bound = bound


class IdempotencyKeyReused(GatewayError):
    """422: this Idempotency-Key already stands for a different request of this client."""


class BodyTimeout(GatewayError):
    """408: the gateway did not receive the whole body in time; nothing changed."""


class TooManyRequests(GatewayError):
    """429: this client has too many requests in flight at the gateway; nothing changed.

    `retry_after` is the gateway's `Retry-After` in seconds (None if absent).
    """

    def __init__(
        self, message: str, *, status: int | None, code: str | None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status, code=code)
        self.retry_after = retry_after


class OutcomeUnknown(GatewayError):
    """The request may or may not have been applied: a 5xx (but 501), a timeout, or a connection
    dropped after the request could have been sent.

    `GatewayClient` has already retried it with the same `idempotency_key`
    (`GatewayRetry`) when it raises this; `attempts` says how often it was
    sent. Send it again later with `idempotency_key=` set to this key: if the
    first one was applied, the gateway answers its outcome instead of
    applying it twice. `idempotency_key` is None for a request without one (a
    read, or a client with `retry=None`).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        code: str | None,
        idempotency_key: str | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message, status=status, code=code)
        self.idempotency_key = idempotency_key
        self.attempts = attempts
