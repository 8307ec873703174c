"""Errors become a status and a JSON body; every answer is counted; every refusal is logged.

This is the one place exceptions turn into HTTP. A client never sees a
traceback or an HTML page, nor any text that came from elsewhere: a 5xx
body holds its `error` code, a fixed message for that code and a
`request_id` (also the `X-Request-Id` header), while the exception, its
message (driver text, SQL, parameters, paths) and its traceback go to the
log under that id. Unknown failures are 500 `internal_error`, a lost storage
outcome is 503 (never 2xx), and each refusal is logged as one JSON object
(resource, token, highest, client) for operators. An unknown route or a
method a path does not take is answered like every other error, with a
`detail` that says what exists (and, for 405, the `Allow` header of RFC
9110). A key bound to a resource outside the caller's scope is refused
without that resource's name (`HiddenBinding`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.app_keys import AppKeys, RequestKeys
from gateway.errors import HiddenBinding, Refusal
from lockclient.wire import IDEMPOTENCY_KEY_REUSED, RESOURCE_MISMATCH, STALE_TOKEN
from storage.errors import (
    BelowMark,
    BoundElsewhere,
    IdempotencyKeyConflict,
    ObjectNotFound,
    StorageError,
)

log = logging.getLogger("gateway.refusals")

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}

# The whole text of a 5xx body, per error code: the exception's own message may carry a driver's
# text (SQL, parameters, file paths), so it goes to the log only.
SERVER_ERROR_DETAILS = {
    "storage_unavailable": "storage failed or did not answer; nothing was acknowledged and the outcome "
    "is unknown: retry (with the same Idempotency-Key), and see the gateway log under request_id",
    "request_timeout": "the request ran past its deadline; its outcome is unknown: retry (with the same "
    "Idempotency-Key)",
    "token_source_unavailable": "the token source did not answer; nothing was written, retry",
    "token_source_regressed": "the token source's bound for this resource is below its mark: the source "
    "went back (restored or reset) and must be moved past the mark; nothing was written",
    "upstream_unavailable": "the upstream is unreachable; the request was not applied, retry",
    "upstream_failed": "the upstream answered an error, or an answer the gateway cannot pass on (such as a "
    "malformed Fencing-Token); see the gateway log under request_id",
    "upstream_timeout": "the upstream did not answer in time; the outcome is unknown",
    "upstream_contended": "the store's object changed under every conditional write this request sent; "
    "none was applied, retry",
    "upstream_outcome_unknown": "the first attempt under this Idempotency-Key got no answer from the store, "
    "and the store cannot tell whether it landed; nothing more was sent, retry later with the same key",
    "replica_claim_lapsed": "this gateway no longer holds its claim as the one trust-path replica on its "
    "database; nothing was sent upstream, retry on the replica that holds it",
    "shutting_down": "the gateway is shutting down and admits no new requests; nothing was written, "
    "retry on another gateway",
    "not_supported": "not available in this mode (an http(s) proxy offers no listing and no Idempotency-Key)",
    "precondition_not_supported": "If-Match / If-None-Match on a write is honoured only in front of an "
    "s3:// or a conditional http(s) upstream; nothing was written, send the write without it",
    "internal_error": "unexpected failure; the gateway log has the detail under request_id",
}
SERVER_ERROR_DETAIL = "the gateway could not complete the request; see the gateway log under request_id"
# Fields of a 5xx body that the gateway computed itself (no foreign text, no internal address).
SERVER_ERROR_FIELDS = ("resource", "token", "highest", "bound", "key", "upstream_status")
REQUEST_ID_HEADER = "X-Request-Id"

# Routes whose refusals enter the audit trail: those that name a key or resource.
AUDITED_ROUTES = frozenset({"put_object", "get_object", "delete_object", "list_objects", "get_fence"})
RETRY_AFTER = "1"  # seconds a client told 429 should wait


def _refused(request: web.Request, exc: BaseException) -> web.Response:
    """The JSON answer to `exc`, logged, and queued for the audit trail unless already in it."""
    if isinstance(exc, BoundElsewhere):
        exc = _in_scope(request, exc)
    status, body = _answer(request, exc)
    headers: dict[str, str] = {}
    if status >= 500:
        body = _server_error_body(body)
        headers[REQUEST_ID_HEADER] = str(body["request_id"])
    elif status == 429:
        headers["Retry-After"] = RETRY_AFTER
    elif isinstance(exc, web.HTTPMethodNotAllowed):
        headers["Allow"] = exc.headers["Allow"]
    _log_refusal(request, status, body, exc)
    route = request.match_info.route.name
    already = isinstance(exc, ObjectNotFound) and exc.audited  # committed with its raised mark
    if route in AUDITED_ROUTES and not already and AppKeys.audit in request.app:
        client = request.get(RequestKeys.client) or f"ip:{request.remote}"
        request.app[AppKeys.audit].refused(request, client, status, body)
    return web.json_response(body, status=status, headers=headers)


def _in_scope(request: web.Request, exc: BoundElsewhere) -> BoundElsewhere | HiddenBinding:
    """`exc` as it is if the caller may see the resource the key belongs to; else `HiddenBinding`: the
    same answer without that resource's name."""
    credentials = request.get(RequestKeys.credentials)
    if credentials is not None and credentials.shown(exc.bound) is not None:
        return exc
    name = "" if credentials is None or credentials.key is None else credentials.key.name
    hidden = HiddenBinding(
        f"key {exc.key!r} belongs to another resource than {exc.resource!r}, one outside the prefixes of "
        f"API key {name!r}, so it is not named here: a key is fenced by the mark of its "
        "own resource only and never moves to another one (not even after a delete); write it with a "
        "key whose scope covers its resource, sending that resource's name and a token of its lock, or "
        "ask the operator which resource it belongs to",
        fields={"key": exc.key, "resource": exc.resource, "object_resource": None},
    )
    hidden.__cause__ = exc
    return hidden


def _server_error_body(body: dict[str, object]) -> dict[str, object]:
    """The code, the fixed message and the request id; only fields the gateway computed itself."""
    code = str(body["error"])
    clean: dict[str, object] = {"error": code}
    clean |= {name: body[name] for name in SERVER_ERROR_FIELDS if name in body}
    clean["detail"] = SERVER_ERROR_DETAILS.get(code, SERVER_ERROR_DETAIL)
    clean["request_id"] = secrets.token_hex(8)
    return clean


def _answer(request: web.Request, exc: BaseException) -> tuple[int, dict[str, object]]:
    """Status and body for an exception raised while handling a request."""
    if isinstance(exc, Refusal):
        return exc.status, exc.body()
    if isinstance(exc, BelowMark):
        return 409, {
            "error": STALE_TOKEN,
            "resource": exc.resource,
            "token": exc.token,
            "highest": exc.highest,
            "detail": str(exc),
        }
    if isinstance(exc, BoundElsewhere):
        return 409, {
            "error": RESOURCE_MISMATCH,
            "key": exc.key,
            "resource": exc.resource,
            "object_resource": exc.bound,
            "detail": str(exc),
        }
    if isinstance(exc, IdempotencyKeyConflict):
        return 422, {"error": IDEMPOTENCY_KEY_REUSED, "detail": str(exc)}
    if isinstance(exc, ObjectNotFound):
        return 404, {"error": "not_found", "key": exc.key, "detail": str(exc)}
    if isinstance(exc, StorageError):  # unavailable, or a failure nobody foresaw: the outcome is unknown
        return 503, {"error": "storage_unavailable"}
    if isinstance(exc, TimeoutError):
        return 503, {"error": "request_timeout"}
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        detail = f"{exc.method} is not allowed on {request.path[:80]!r}; it takes {allowed}"
        return 405, {"error": "method_not_allowed", "detail": detail}
    if isinstance(exc, web.HTTPNotFound):
        return 404, {"error": "not_found", "detail": f"no route {request.path[:80]!r}; {_routes(request)}"}
    if isinstance(exc, web.HTTPException):
        code = _HTTP_CODES.get(exc.status, f"http_{exc.status}")
        return exc.status, {"error": code, "detail": exc.reason}
    return 500, {"error": "internal_error"}


def _routes(request: web.Request) -> str:
    """What this gateway serves, for the answer to an unknown route."""
    methods: dict[str, list[str]] = {}
    for route in request.app.router.routes():
        if route.resource is not None:
            methods.setdefault(route.resource.canonical, []).append(route.method)
    listed = "; ".join(f"{' '.join(sorted(set(m)))} {path}" for path, m in methods.items())
    return f"this gateway serves {listed} (the contract: GET /v1/openapi.json)"


def _log_refusal(request: web.Request, status: int, body: dict[str, object], exc: BaseException) -> None:
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
    if status < 500:  # the detail of a 4xx is the gateway's own sentence: what the client did
        log.warning("refused %s", json.dumps(record | {"detail": body.get("detail")}))
        return
    # The whole story, under the id the client was given: the message and, for a failure that
    # came from elsewhere (a driver, a socket, a deadline, a bug), the traceback with its causes.
    record |= {"request_id": body["request_id"], "exception": f"{type(exc).__name__}: {exc}"}
    foreign = exc.__cause__ is not None or not isinstance(exc, Refusal)
    # A planned shutdown refuses new requests by design: nothing failed, nobody should be paged. A
    # readiness probe asks every few seconds while a part is down: it says what is down each time,
    # and the requests that fail log the cause with its traceback.
    if body["error"] == "shutting_down" or request.match_info.route.name == "readyz":
        log.warning("refused %s", json.dumps(record))
        return
    log.error("refused %s", json.dumps(record), exc_info=exc if foreign else None)


async def _route_of(request: web.Request) -> str:
    """The route pattern of a request; for a 405 the pattern its path matched (a rare path)."""
    resource = request.match_info.route.resource
    if resource is not None:
        return resource.canonical
    for candidate in request.app.router.resources():
        if (await candidate.resolve(request))[1]:
            return candidate.canonical
    return "unmatched"


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every exception into JSON, count the answer, log the refusal."""
    try:
        response = await handler(request)
    except asyncio.CancelledError:
        raise
    except web.HTTPException as exc:
        response = exc if exc.status < 400 else _refused(request, exc)
    except Exception as exc:  # noqa: BLE001 - the last line, logged with its traceback by _refused
        response = _refused(request, exc)
    if response.status == 405:
        route = await _route_of(request)
    else:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
    request.app[AppKeys.metrics].answered(route, request.method, response.status)
    return response


@web.middleware
async def deadline_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bound every request's time; a request past it is 503 with an unknown outcome."""
    async with asyncio.timeout(request.app[AppKeys.settings].request_timeout):
        return await handler(request)
