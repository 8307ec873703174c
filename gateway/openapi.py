"""The OpenAPI 3.1 document of the gateway's HTTP API, served at /v1/openapi.json.

Kept as data next to the routes; a test checks that both list the same
methods and paths, so neither can drift alone.
"""

from __future__ import annotations

from typing import Any

_ERROR = {"$ref": "#/components/schemas/Error"}
_META = {"$ref": "#/components/schemas/ObjectMeta"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    text = {
        400: "token, resource or key malformed (bad_request)",
        401: "no or unknown API key (unauthorized)",
        403: "the API key is not scoped to this resource or key (forbidden)",
        404: "no such object (not_found)",
        408: "the body arrived too slowly (body_timeout); nothing changed",
        409: "token below the resource's mark (stale_token); nothing changed",
        413: "body over the limit (payload_too_large)",
        422: "token above the token source's upper bound (token_from_the_future), or an Idempotency-Key "
        "already used for another request (idempotency_key_reused)",
        428: "a write without Fencing-Token (token_required)",
        429: "the client has too many requests in flight (too_many_requests); see Retry-After",
        502: "proxy mode: the upstream answered an error (upstream_failed)",
        503: "storage, token source or upstream unreachable, token_source_regressed, or shutting_down; "
        "nothing acknowledged",
        504: "proxy mode: the upstream did not answer in time (upstream_timeout)",
    }
    return {str(s): _json(_ERROR, text[s]) for s in statuses}


_TOKEN = {
    "name": "Fencing-Token",
    "in": "header",
    "description": "the lease's fencing token, a decimal integer in 1..2^63-1",
    "schema": {"type": "string", "pattern": "^[1-9][0-9]{0,18}$"},
}
_RESOURCE = {
    "name": "Fencing-Resource",
    "in": "header",
    "required": False,
    "description": "the lock the token belongs to; default: the object key",
    "schema": {"type": "string"},
}
_IDEMPOTENCY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "a retry with the same key and request returns the first accepted outcome",
    "schema": {"type": "string", "pattern": "^[!-~]{1,128}$"},
}
_KEY = {"name": "key", "in": "path", "required": True, "schema": {"type": "string"}}
_FENCED = (400, 401, 403, 409, 422, 429, 503)

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "fencegate gateway",
        "version": "1",
        "description": "A fenced object store: requests carry a fencing token; tokens below a resource's "
        "high-water mark are refused.",
    },
    "components": {
        "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {"type": "string"},
                    "detail": {"type": "string"},
                    "resource": {"type": "string"},
                    "token": {"type": "integer"},
                    "highest": {"type": "integer"},
                    "bound": {"type": "integer"},
                },
            },
            "ObjectMeta": {
                "type": "object",
                "required": ["key", "resource", "token", "version", "size"],
                "properties": {
                    "key": {"type": "string"},
                    "resource": {"type": "string"},
                    "token": {"type": ["integer", "null"]},
                    "version": {"type": ["integer", "null"]},
                    "size": {"type": "integer"},
                },
            },
        },
    },
    "security": [{}, {"apiKey": []}],
    "paths": {
        "/v1/objects/{key}": {
            "put": {
                "summary": "store the body under the key, fenced",
                "parameters": [_KEY, {**_TOKEN, "required": True}, _RESOURCE, _IDEMPOTENCY],
                "requestBody": {"content": {"application/octet-stream": {"schema": {}}}},
                "responses": {
                    "200": _json(_META, "replaced"),
                    "201": _json(_META, "created"),
                    **_errors(*_FENCED, 408, 413, 428, 502, 504),
                },
            },
            "get": {
                "summary": "read the object; with Fencing-Token a fenced read that raises the mark",
                "parameters": [_KEY, {**_TOKEN, "required": False}, _RESOURCE],
                "responses": {
                    "200": {
                        "description": "the bytes; headers Fencing-Token (writer), ETag, Object-Version",
                        "content": {"application/octet-stream": {"schema": {}}},
                    },
                    **_errors(*_FENCED, 404, 502, 504),
                },
            },
            "delete": {
                "summary": "delete the object, fenced",
                "parameters": [_KEY, {**_TOKEN, "required": True}, _RESOURCE, _IDEMPOTENCY],
                "responses": {"200": _json(_META, "deleted"), **_errors(*_FENCED, 404, 428, 502, 504)},
            },
        },
        "/v1/objects": {
            "get": {
                "summary": "list objects by key prefix, in key order",
                "parameters": [
                    {"name": "prefix", "in": "query", "schema": {"type": "string"}},
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                    },
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "prefix": {"type": "string"},
                                "objects": {"type": "array", "items": _META},
                                "next": {"type": ["string", "null"]},
                            },
                        },
                        "the page of objects; `next` is the `after` of the next page",
                    ),
                    **_errors(400, 401, 403, 429, 503),
                },
            },
        },
        "/v1/fences/{resource}": {
            "get": {
                "summary": "the resource's high-water mark (0 if never fenced)",
                "parameters": [
                    {"name": "resource", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {"resource": {"type": "string"}, "highest": {"type": "integer"}},
                        },
                        "the mark",
                    ),
                    **_errors(400, 401, 403, 503),
                },
            },
        },
        "/healthz": {"get": {"summary": "liveness", "responses": {"200": {"description": "alive"}}}},
        "/readyz": {
            "get": {
                "summary": "readiness: storage reachable",
                "responses": {"200": {"description": "ready"}, **_errors(503)},
            }
        },
        "/metrics": {
            "get": {"summary": "Prometheus text format", "responses": {"200": {"description": "metrics"}}}
        },
        "/v1/openapi.json": {
            "get": {"summary": "this document", "responses": {"200": {"description": "OpenAPI"}}}
        },
    },
}
