"""Errors become a status and a JSON body; every answer is counted; every refusal is logged.

This is the one place exceptions turn into HTTP. A client never sees a
traceback or an HTML page: unknown failures are 500 `internal_error`, a lost
storage outcome is 503 (never 2xx), and each refusal is logged as one JSON
object (resource, token, highest, client) for operators.
"""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.errors import Refusal
from gateway.keys import AppKeys, RequestKeys
from storage.errors import (
    IdempotencyKeyReused,
    ObjectNotFound,
    ResourceMismatch,
    StaleTokenError,
    StorageError,
    StorageUnavailable,
)

log = logging.getLogger("gateway.refusals")

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}


# Routes whose refusals enter the audit trail: those that name a key or resource.
AUDITED_ROUTES = frozenset({"put_object", "get_object", "delete_object", "list_objects", "get_fence"})
RETRY_AFTER = "1"  # seconds a client told 429 should wait


def _json_error(status: int, body: dict[str, object]) -> web.Response:
    headers = {"Retry-After": RETRY_AFTER} if status == 429 else None
    return web.json_response(body, status=status, headers=headers)


def _refused(request: web.Request, exc: BaseException) -> web.Response:
    """The JSON answer to `exc`, logged, and queued for the audit trail unless already in it."""
    status, body = _answer(exc)
    _log_refusal(request, status, body)
    route = request.match_info.route.name
    already = isinstance(exc, ObjectNotFound) and exc.audited  # committed with its raised mark
    if route in AUDITED_ROUTES and not already and AppKeys.audit in request.app:
        client = request.get(RequestKeys.client) or f"ip:{request.remote}"
        request.app[AppKeys.audit].refused(request, client, status, body)
    return _json_error(status, body)


def _answer(exc: BaseException) -> tuple[int, dict[str, object]]:
    """Status and body for an exception raised while handling a request."""
    if isinstance(exc, Refusal):
        return exc.status, exc.body()
    if isinstance(exc, StaleTokenError):
        return 409, {
            "error": "stale_token",
            "resource": exc.resource,
            "token": exc.token,
            "highest": exc.highest,
            "detail": str(exc),
        }
    if isinstance(exc, ResourceMismatch):
        return 409, {
            "error": "resource_mismatch",
            "key": exc.key,
            "resource": exc.resource,
            "object_resource": exc.bound,
            "detail": str(exc),
        }
    if isinstance(exc, IdempotencyKeyReused):
        return 422, {"error": "idempotency_key_reused", "detail": str(exc)}
    if isinstance(exc, ObjectNotFound):
        return 404, {"error": "not_found", "key": exc.key, "detail": str(exc)}
    if isinstance(exc, StorageUnavailable):
        return 503, {"error": "storage_unavailable", "detail": f"{exc}; nothing was acknowledged"}
    if isinstance(exc, StorageError):
        return 503, {"error": "storage_error", "detail": str(exc)}
    if isinstance(exc, TimeoutError):
        return 503, {
            "error": "request_timeout",
            "detail": "the request ran past its deadline; its outcome is unknown",
        }
    if isinstance(exc, web.HTTPException):
        code = _HTTP_CODES.get(exc.status, f"http_{exc.status}")
        return exc.status, {"error": code, "detail": exc.reason}
    return 500, {"error": "internal_error", "detail": "unexpected failure; see the gateway log"}


def _log_refusal(request: web.Request, status: int, body: dict[str, object]) -> None:
    record = {
        "status": status,
        "error": body.get("error"),
        "method": request.method,
        "path": request.path,
        "resource": body.get(
            "resource", request.headers.get("Fencing-Resource", request.match_info.get("key"))
        ),
        "token": body.get("token", request.headers.get("Fencing-Token")),
        "highest": body.get("highest"),
        "client": request.get(RequestKeys.client, request.remote),
    }
    log.log(logging.WARNING if status < 500 else logging.ERROR, "refused %s", json.dumps(record))


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every exception into JSON, count the answer, log the refusal."""
    try:
        response = await handler(request)
    except asyncio.CancelledError:
        raise
    except web.HTTPException as exc:
        response = exc if exc.status < 400 else _refused(request, exc)
    except Exception as exc:  # the last line: no traceback or HTML ever reaches a client
        if not isinstance(exc, Refusal | StorageError | TimeoutError):
            log.exception("unexpected failure on %s %s", request.method, request.path)
        response = _refused(request, exc)
    route = request.match_info.route.resource
    request.app[AppKeys.metrics].answered(
        route.canonical if route is not None else "unmatched", request.method, response.status
    )
    return response


@web.middleware
async def deadline_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bound every request's time; a request past it is 503 with an unknown outcome."""
    async with asyncio.timeout(request.app[AppKeys.settings].request_timeout):
        return await handler(request)
