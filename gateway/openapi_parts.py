"""The pieces the OpenAPI document (`gateway.openapi`) is built from: answers, parameters, schemas.

Kept apart from the operations so each path there reads as what it takes
and answers, while the rules behind each piece live here once: every error
status's meaning (the `error` codes of docs/gateway.md), the headers an
object answer carries, each parameter's pattern from the same rules
`gateway.parsing` checks with (`lockclient.wire`), and the schemas under
`components`. Nothing here depends on the served gateway's settings.
"""

from __future__ import annotations

from typing import Any

from gateway.parsing import MAX_HTTP_KEY_LENGTH, PRINTABLE_PATTERN
from gateway.settings_checks import UPSTREAM_ORDERINGS
from lockclient.wire import (
    HEADER_RESOURCE_PATTERN,
    IDEMPOTENCY_KEY_PATTERN,
    MAX_RESOURCE_LENGTH,
    MAX_TOKEN,
    PATH_KEY_PATTERN,
    STRONG_TAG_PATTERN,
    TOKEN_PATTERN,
)
from storage.models import MAX_KEY_LENGTH

_ERROR = {"$ref": "#/components/schemas/Error"}
META = {"$ref": "#/components/schemas/ObjectMeta"}
LISTED = {"$ref": "#/components/schemas/ListedObject"}
_JSON = "application/json"

# What each error status means; the `error` codes are those of docs/gateway.md.
_STATUS_TEXT = {
    400: "malformed request (bad_request): token, resource, key, prefix or limit; a fencing header, "
    "Idempotency-Key or Authorization sent twice or as a comma list; a Content-Encoding other than "
    "identity; a body cut short by the client closing the connection; an If-Match other than one strong "
    "ETag or *, an If-None-Match other than *, or both; nothing changed",
    401: "API keys are configured and none, or an unknown one, was sent (unauthorized)",
    403: "the API key (or client certificate) is not scoped to this name, or may only read (forbidden)",
    404: "no such object (not_found)",
    408: "the body arrived too slowly (body_timeout); nothing changed",
    409: "token below the resource's mark (stale_token; body has resource, token, highest), or the key "
    "belongs to another resource than the one named (resource_mismatch; body has key, resource, "
    "object_resource, null if the caller's API key does not cover it); nothing changed",
    412: "proxy mode: the If-Match / If-None-Match: * does not hold for the key's current version at the "
    "store (precondition_failed; body has key); nothing written",
    413: "body over the gateway's --max-body (payload_too_large); nothing changed",
    422: "token above what the token source has issued (token_from_the_future; body has resource, token, "
    "bound), or an Idempotency-Key that stands for another request (idempotency_key_reused)",
    428: "a write without Fencing-Token (token_required)",
    429: "the client has --max-client-requests in flight (too_many_requests); see Retry-After",
    500: "a failure nobody foresaw (internal_error): the detail is in the gateway log under request_id",
    501: "not available in an http(s) proxy (not_supported): listing, Idempotency-Key; If-Match or "
    "If-None-Match on a store that does not check it (precondition_not_supported)",
    502: "proxy mode: the upstream answered an error, or a GET with a Fencing-Token that is not one token "
    "in the range above (upstream_failed)",
    503: "nothing acknowledged (storage_unavailable, request_timeout: the outcome is unknown; "
    "upstream_outcome_unknown: an Idempotency-Key retry the store cannot settle; "
    "token_source_unavailable, token_source_regressed, upstream_unavailable, upstream_contended, "
    "replica_claim_lapsed, shutting_down)",
    504: "proxy mode: the upstream did not answer in time (upstream_timeout); the outcome is unknown",
}
READY = {
    "type": "object",
    "required": ["status"],
    "properties": {
        "status": {"type": "string", "enum": ["ready"]},
        "upstream_ordering": {
            "type": "string",
            "enum": list(UPSTREAM_ORDERINGS),
            "description": "proxy mode only: what keeps the upstream's writes in token order "
            "(--upstream-ordering)",
        },
    },
}
_REQUEST_ID = {
    "description": "names the gateway log lines holding this failure's detail",
    "schema": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
}
HEADERS = {
    "Fencing-Token": {
        "description": "the token that wrote the object (absent in proxy mode if the upstream does not say)",
        "schema": {"type": "string", "pattern": f"^(?:{TOKEN_PATTERN})$"},
    },
    "Fencing-Resource": {
        "description": "the resource whose mark fenced the request (a plain read: the one the key belongs "
        "to; absent if the caller's API key does not cover that resource)",
        "schema": {},
    },
    "ETag": {
        "description": "the SHA-256 of the bytes, quoted",
        "schema": {"type": "string", "pattern": '^"[0-9a-f]{64}"$'},
    },
    "Object-Version": {
        "description": "writes since the object was created",
        "schema": {"type": "string", "pattern": "^[1-9][0-9]*$"},
    },
}


def _error(status: int, *, bodyless: bool = False) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": _STATUS_TEXT[status]}
    if not bodyless:
        answer["content"] = {_JSON: {"schema": _ERROR}}
    if status >= 500:
        answer["headers"] = {"X-Request-Id": _REQUEST_ID}
    elif status == 429:
        answer["headers"] = {"Retry-After": {"schema": {"type": "string", "pattern": "^[0-9]+$"}}}
    return answer


def errors(*statuses: int, bodyless: bool = False) -> dict[str, Any]:
    return {str(s): _error(s, bodyless=bodyless) for s in sorted(statuses)}


def json_answer(schema: dict[str, Any], description: str, *headers: str) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description, "content": {_JSON: {"schema": schema}}}
    if headers:
        answer["headers"] = {name: HEADERS[name] for name in headers}
    return answer


# The object a PUT wrote, to read and delete next (schemathesis' stateful phase follows these).
KEY_LINKS = {
    name: {"operationId": name, "parameters": {"key": "$request.path.key"}}
    for name in ("get_object", "delete_object")
}


def name_schema(pattern: str, limit: int) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": limit, "pattern": f"^(?:{pattern})$"}


def optional_header(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A request header an operation may send."""
    return {"name": name, "in": "header", "required": False, "description": description, "schema": schema}


_TOKEN_SCHEMA = {"type": "string", "pattern": f"^(?:{TOKEN_PATTERN})$"}
TOKEN_PARAM = {
    "name": "Fencing-Token",
    "in": "header",
    "description": f"the lease's fencing token: a decimal integer in 1..{MAX_TOKEN} with no sign, spaces "
    "or leading zeros; one header, one value",
    "schema": _TOKEN_SCHEMA,
}
RESOURCE_PARAM = optional_header(
    "Fencing-Resource",
    "the lock the token belongs to (default: the object key); one header, one value, so no comma",
    name_schema(HEADER_RESOURCE_PATTERN, MAX_RESOURCE_LENGTH),
)
IDEMPOTENCY_PARAM = optional_header(
    "Idempotency-Key",
    "a retry with the same key and the same request (method, key, resource, token, body, "
    "Content-Type, precondition) returns the first accepted outcome; another request under the key is 422",
    {"type": "string", "pattern": f"^{IDEMPOTENCY_KEY_PATTERN}$"},
)
IF_MATCH_PARAM = optional_header(
    "If-Match",
    "proxy mode: write only over the version with this strong ETag (the one a read "
    "answered), or over any object (*); another version, or a deleted key, is 412 precondition_failed. "
    "One tag, one header; not with If-None-Match. The built-in store answers 501 "
    "precondition_not_supported",
    {"type": "string", "pattern": f"^(\\*|{STRONG_TAG_PATTERN})$"},
)
IF_NONE_MATCH_PARAM = optional_header(
    "If-None-Match",
    "proxy mode: create only (*): 412 precondition_failed if the key holds an object "
    "(a deleted key counts as absent)",
    {"type": "string", "enum": ["*"]},
)
KEY_PARAM = {
    "name": "key",
    "in": "path",
    "required": True,
    "description": f"segments of letters, digits and _.~:@=+,%- joined by single slashes, no '.' or '..' "
    f"segment; at most {MAX_HTTP_KEY_LENGTH} characters, since the key is the default resource",
    "schema": name_schema(PATH_KEY_PATTERN, MAX_HTTP_KEY_LENGTH),
}
PRINTABLE = {"type": "string", "maxLength": MAX_KEY_LENGTH, "pattern": f"^{PRINTABLE_PATTERN}$"}
# every fenced object operation: malformed, credentials, stale, future, the client's cap, storage,
# the proxy mode's upstream, and a bug
FENCED = (400, 401, 403, 409, 422, 429, 500, 502, 503, 504)


def _object_meta(resource: dict[str, Any]) -> dict[str, Any]:
    """An object as an answer describes it; a listing may not name its resource (`ListedObject`)."""
    return {
        "type": "object",
        "required": ["key", "resource", "token", "version", "size"],
        "properties": {
            "key": {"type": "string"},
            "resource": resource,
            "token": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_TOKEN},
            "version": {"type": ["integer", "null"], "minimum": 1},
            "size": {"type": "integer", "minimum": 0},
        },
    }


# The document's `components`: the scheme a key is sent by, and the schemas answers refer to.
COMPONENTS: dict[str, Any] = {
    "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
    "schemas": {
        "Error": {
            "type": "object",
            "required": ["error", "detail"],
            "properties": {
                "error": {"type": "string"},
                "detail": {"type": "string"},
                "request_id": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
                "resource": {"type": "string"},
                "object_resource": {
                    "type": ["string", "null"],
                    "description": "the resource the key belongs to; null if the caller's API key "
                    "does not cover it",
                },
                "key": {"type": "string"},
                "token": {"type": "integer"},
                "highest": {"type": "integer"},
                "bound": {"type": "integer"},
                "name": {"type": "string"},
                "access": {"type": "string"},
                "client": {"type": "string"},
                "limit": {"type": "integer"},
                "upstream_status": {"type": "string"},
            },
        },
        "ObjectMeta": _object_meta({"type": "string"}),
        "ListedObject": _object_meta(
            {
                "type": ["string", "null"],
                "description": "the resource the key belongs to; null if the caller's API key does "
                "not cover it",
            }
        ),
    },
}
