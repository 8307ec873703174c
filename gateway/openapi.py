"""The OpenAPI 3.1 document of the gateway's HTTP API, served at /v1/openapi.json.

Kept as data next to the routes; a test checks that both list the same
methods and paths, so neither can drift alone. It states every constraint
the server enforces, from the same patterns `gateway.parsing` checks with
(a client generated from it sends nothing refused as malformed), and every
status each operation can answer; `schemathesis run --checks all` holds the
two together on both storage engines (tests/gateway/test_contract.py). The
body limit is the served gateway's own `--max-body`.
"""

from __future__ import annotations

import functools
from typing import Any

from gateway.parsing import MAX_HTTP_KEY_LENGTH, MAX_LIST_LIMIT, PRINTABLE_PATTERN
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
_META = {"$ref": "#/components/schemas/ObjectMeta"}
_LISTED = {"$ref": "#/components/schemas/ListedObject"}
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
_READY = {
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
_HEADERS = {
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


def _errors(*statuses: int, bodyless: bool = False) -> dict[str, Any]:
    return {str(s): _error(s, bodyless=bodyless) for s in sorted(statuses)}


def _json(schema: dict[str, Any], description: str, *headers: str) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description, "content": {_JSON: {"schema": schema}}}
    if headers:
        answer["headers"] = {name: _HEADERS[name] for name in headers}
    return answer


# The object a PUT wrote, to read and delete next (schemathesis' stateful phase follows these).
_KEY_LINKS = {
    name: {"operationId": name, "parameters": {"key": "$request.path.key"}}
    for name in ("get_object", "delete_object")
}


def _name(pattern: str, limit: int) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": limit, "pattern": f"^(?:{pattern})$"}


_TOKEN_SCHEMA = {"type": "string", "pattern": f"^(?:{TOKEN_PATTERN})$"}
_TOKEN = {
    "name": "Fencing-Token",
    "in": "header",
    "description": f"the lease's fencing token: a decimal integer in 1..{MAX_TOKEN} with no sign, spaces "
    "or leading zeros; one header, one value",
    "schema": _TOKEN_SCHEMA,
}
_RESOURCE = {
    "name": "Fencing-Resource",
    "in": "header",
    "required": False,
    "description": "the lock the token belongs to (default: the object key); one header, one value, so no "
    "comma",
    "schema": _name(HEADER_RESOURCE_PATTERN, MAX_RESOURCE_LENGTH),
}
_IDEMPOTENCY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "a retry with the same key and the same request (method, key, resource, token, body, "
    "Content-Type, precondition) returns the first accepted outcome; another request under the key is 422",
    "schema": {"type": "string", "pattern": f"^{IDEMPOTENCY_KEY_PATTERN}$"},
}
_IF_MATCH = {
    "name": "If-Match",
    "in": "header",
    "required": False,
    "description": "proxy mode: write only over the version with this strong ETag (the one a read "
    "answered), or over any object (*); another version, or a deleted key, is 412 precondition_failed. "
    "One tag, one header; not with If-None-Match. The built-in store answers 501 "
    "precondition_not_supported",
    "schema": {"type": "string", "pattern": f"^(\\*|{STRONG_TAG_PATTERN})$"},
}
_IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "description": "proxy mode: create only (*): 412 precondition_failed if the key holds an object "
    "(a deleted key counts as absent)",
    "schema": {"type": "string", "enum": ["*"]},
}
_KEY = {
    "name": "key",
    "in": "path",
    "required": True,
    "description": f"segments of letters, digits and _.~:@=+,%- joined by single slashes, no '.' or '..' "
    f"segment; at most {MAX_HTTP_KEY_LENGTH} characters, since the key is the default resource",
    "schema": _name(PATH_KEY_PATTERN, MAX_HTTP_KEY_LENGTH),
}
_PRINTABLE = {"type": "string", "maxLength": MAX_KEY_LENGTH, "pattern": f"^{PRINTABLE_PATTERN}$"}
# every fenced object operation: malformed, credentials, stale, future, the client's cap, storage,
# the proxy mode's upstream, and a bug
_FENCED = (400, 401, 403, 409, 422, 429, 500, 502, 503, 504)


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


@functools.cache
def document(*, max_body: int, preconditions: bool = False) -> dict[str, Any]:
    """The document served by a gateway whose body limit is `max_body` bytes; `If-Match` and
    `If-None-Match` on writes only where its store checks them (`preconditions`, proxy mode)."""
    conditions = [_IF_MATCH, _IF_NONE_MATCH] if preconditions else []
    read: dict[str, Any] = {
        "parameters": [_KEY, {**_TOKEN, "required": False}, _RESOURCE],
        "responses": {
            "200": {
                "description": "the bytes, with the Content-Type they were written with",
                "headers": {name: _HEADERS[name] for name in _HEADERS},
                "content": {"*/*": {"schema": {}}},
            },
            **_errors(*_FENCED, 404),
        },
    }
    head = {
        "summary": "the headers of GET without the body; with Fencing-Token a fenced read",
        "parameters": read["parameters"],
        "responses": {
            "200": {"description": "as GET", "headers": read["responses"]["200"]["headers"]},
            **_errors(*_FENCED, 404, bodyless=True),
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "fencegate gateway",
            "version": "1",
            "description": "A fenced object store: requests carry a fencing token; tokens below a "
            "resource's high-water mark are refused. Every error is JSON with an `error` code and a "
            "`detail`; a 5xx adds `request_id` (and the X-Request-Id header) and never carries "
            "internals. A method a path does not take is 405 with `Allow`; an unknown path is 404.",
        },
        "components": {
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
        },
        "security": [{}, {"apiKey": []}],
        "paths": {
            "/v1/objects/{key}": {
                "put": {
                    "operationId": "put_object",
                    "summary": "store the body under the key, fenced",
                    "parameters": [_KEY, {**_TOKEN, "required": True}, _RESOURCE, _IDEMPOTENCY, *conditions],
                    "requestBody": {
                        "content": {
                            "application/octet-stream": {
                                "schema": {"type": "string", "format": "binary", "maxLength": max_body}
                            }
                        }
                    },
                    "responses": {
                        "200": {
                            **_json(_META, "replaced", "Fencing-Token", "Fencing-Resource", "ETag"),
                            "links": _KEY_LINKS,
                        },
                        "201": {
                            **_json(_META, "created", "Fencing-Token", "Fencing-Resource", "ETag"),
                            "links": _KEY_LINKS,
                        },
                        **_errors(*_FENCED, 408, 412, 413, 428, 501),
                    },
                },
                "get": {
                    "operationId": "get_object",
                    "summary": "read the object; with Fencing-Token a fenced read that raises the mark",
                    **read,
                },
                "head": {"operationId": "head_object", **head},
                "delete": {
                    "operationId": "delete_object",
                    "summary": "delete the object, fenced",
                    "parameters": [_KEY, {**_TOKEN, "required": True}, _RESOURCE, _IDEMPOTENCY, *conditions],
                    "responses": {
                        "200": {
                            **_json(_META, "deleted", "Fencing-Token", "Fencing-Resource"),
                            "links": {"get_object": _KEY_LINKS["get_object"]},
                        },
                        **_errors(*_FENCED, 404, 412, 428, 501),
                    },
                },
            },
            "/v1/objects": {
                "get": {
                    "operationId": "list_objects",
                    "summary": "list objects by key prefix, in key order",
                    "parameters": [
                        {"name": "prefix", "in": "query", "schema": _PRINTABLE},
                        {"name": "after", "in": "query", "schema": _PRINTABLE},
                        {
                            "name": "limit",
                            "in": "query",
                            "description": f"at most this many objects (default {MAX_LIST_LIMIT}): ASCII "
                            "decimal digits, no sign, spaces or leading zeros",
                            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIST_LIMIT},
                        },
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["prefix", "objects", "next"],
                                "properties": {
                                    "prefix": {"type": "string"},
                                    "objects": {"type": "array", "items": _LISTED},
                                    "next": {"type": ["string", "null"]},
                                },
                            },
                            "the page of objects; `next` is the `after` of the next page",
                        ),
                        **_errors(400, 401, 403, 429, 500, 501, 503),
                    },
                },
            },
            "/v1/fences/{resource}": {
                "get": {
                    "operationId": "get_fence",
                    "summary": "the resource's high-water mark (0 if never fenced)",
                    "parameters": [
                        {
                            "name": "resource",
                            "in": "path",
                            "required": True,
                            "schema": _name(PATH_KEY_PATTERN, MAX_RESOURCE_LENGTH),
                        }
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["resource", "highest"],
                                "properties": {
                                    "resource": {"type": "string"},
                                    "highest": {"type": "integer", "minimum": 0, "maximum": MAX_TOKEN},
                                },
                            },
                            "the mark",
                        ),
                        **_errors(400, 401, 403, 429, 500, 503),
                    },
                },
            },
            "/healthz": {
                "get": {
                    "operationId": "healthz",
                    "summary": "liveness",
                    "responses": {
                        "200": _json({"type": "object", "required": ["status"]}, "alive"),
                        **_errors(500),
                    },
                }
            },
            "/readyz": {
                "get": {
                    "operationId": "readyz",
                    "summary": "readiness: storage and the token source answer, not shutting down, and in "
                    "trust-path proxy mode this replica holds its claim",
                    "responses": {
                        "200": _json(_READY, "ready"),
                        **_errors(500, 503),
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus text format",
                    "responses": {
                        "200": {"description": "metrics", "content": {"text/plain": {"schema": {}}}},
                        **_errors(500, 503),
                    },
                }
            },
            "/v1/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "this document",
                    "responses": {"200": _json({"type": "object"}, "OpenAPI"), **_errors(500)},
                }
            },
        },
    }
