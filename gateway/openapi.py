"""The OpenAPI 3.1 document of the gateway's HTTP API, served at /v1/openapi.json.

Kept as data next to the routes; a test checks that both list the same
methods and paths, so neither can drift alone. It states every constraint
the server enforces, from the same patterns `gateway.parsing` checks with
(a client generated from it sends nothing refused as malformed), and every
status each operation can answer; `schemathesis run --checks all` holds the
two together on both storage engines (tests/gateway/test_contract.py). The
body limit is the served gateway's own `--max-body`. This module holds the
operations; the answers, parameters and schemas they are built from are
`gateway.openapi_parts`'.
"""

from __future__ import annotations

import functools
from typing import Any

from gateway.openapi_parts import (
    COMPONENTS,
    FENCED,
    HEADERS,
    IDEMPOTENCY_PARAM,
    IF_MATCH_PARAM,
    IF_NONE_MATCH_PARAM,
    KEY_LINKS,
    KEY_PARAM,
    LISTED,
    META,
    PRINTABLE,
    READY,
    RESOURCE_PARAM,
    TOKEN_PARAM,
    errors,
    json_answer,
    name_schema,
)
from gateway.parsing import MAX_LIST_LIMIT
from lockclient.wire import MAX_RESOURCE_LENGTH, MAX_TOKEN, PATH_KEY_PATTERN


@functools.cache
def document(*, max_body: int, preconditions: bool = False) -> dict[str, Any]:
    """The document served by a gateway whose body limit is `max_body` bytes; `If-Match` and
    `If-None-Match` on writes only where its store checks them (`preconditions`, proxy mode)."""
    conditions = [IF_MATCH_PARAM, IF_NONE_MATCH_PARAM] if preconditions else []
    writing = [KEY_PARAM, {**TOKEN_PARAM, "required": True}, RESOURCE_PARAM, IDEMPOTENCY_PARAM, *conditions]
    read: dict[str, Any] = {
        "parameters": [KEY_PARAM, {**TOKEN_PARAM, "required": False}, RESOURCE_PARAM],
        "responses": {
            "200": {
                "description": "the bytes, with the Content-Type they were written with",
                "headers": {name: HEADERS[name] for name in HEADERS},
                "content": {"*/*": {"schema": {}}},
            },
            **errors(*FENCED, 404),
        },
    }
    head = {
        "summary": "the headers of GET without the body; with Fencing-Token a fenced read",
        "parameters": read["parameters"],
        "responses": {
            "200": {"description": "as GET", "headers": read["responses"]["200"]["headers"]},
            **errors(*FENCED, 404, bodyless=True),
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
        "components": COMPONENTS,
        "security": [{}, {"apiKey": []}],
        "paths": {
            "/v1/objects/{key}": {
                "put": {
                    "operationId": "put_object",
                    "summary": "store the body under the key, fenced",
                    "parameters": writing,
                    "requestBody": {
                        "content": {
                            "application/octet-stream": {
                                "schema": {"type": "string", "format": "binary", "maxLength": max_body}
                            }
                        }
                    },
                    "responses": {
                        "200": {
                            **json_answer(META, "replaced", "Fencing-Token", "Fencing-Resource", "ETag"),
                            "links": KEY_LINKS,
                        },
                        "201": {
                            **json_answer(META, "created", "Fencing-Token", "Fencing-Resource", "ETag"),
                            "links": KEY_LINKS,
                        },
                        **errors(*FENCED, 408, 412, 413, 428, 501),
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
                    "parameters": writing,
                    "responses": {
                        "200": {
                            **json_answer(META, "deleted", "Fencing-Token", "Fencing-Resource"),
                            "links": {"get_object": KEY_LINKS["get_object"]},
                        },
                        **errors(*FENCED, 404, 412, 428, 501),
                    },
                },
            },
            "/v1/objects": {
                "get": {
                    "operationId": "list_objects",
                    "summary": "list objects by key prefix, in key order",
                    "parameters": [
                        {"name": "prefix", "in": "query", "schema": PRINTABLE},
                        {"name": "after", "in": "query", "schema": PRINTABLE},
                        {
                            "name": "limit",
                            "in": "query",
                            "description": f"at most this many objects (default {MAX_LIST_LIMIT}): ASCII "
                            "decimal digits, no sign, spaces or leading zeros",
                            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIST_LIMIT},
                        },
                    ],
                    "responses": {
                        "200": json_answer(
                            {
                                "type": "object",
                                "required": ["prefix", "objects", "next"],
                                "properties": {
                                    "prefix": {"type": "string"},
                                    "objects": {"type": "array", "items": LISTED},
                                    "next": {"type": ["string", "null"]},
                                },
                            },
                            "the page of objects; `next` is the `after` of the next page",
                        ),
                        **errors(400, 401, 403, 429, 500, 501, 503),
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
                            "schema": name_schema(PATH_KEY_PATTERN, MAX_RESOURCE_LENGTH),
                        }
                    ],
                    "responses": {
                        "200": json_answer(
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
                        **errors(400, 401, 403, 429, 500, 503),
                    },
                },
            },
            "/healthz": {
                "get": {
                    "operationId": "healthz",
                    "summary": "liveness",
                    "responses": {
                        "200": json_answer({"type": "object", "required": ["status"]}, "alive"),
                        **errors(500),
                    },
                }
            },
            "/readyz": {
                "get": {
                    "operationId": "readyz",
                    "summary": "readiness: storage and the token source answer, not shutting down, and in "
                    "trust-path proxy mode this replica holds its claim",
                    "responses": {
                        "200": json_answer(READY, "ready"),
                        **errors(500, 503),
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus text format",
                    "responses": {
                        "200": {"description": "metrics", "content": {"text/plain": {"schema": {}}}},
                        **errors(500, 503),
                    },
                }
            },
            "/v1/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "this document",
                    "responses": {"200": json_answer({"type": "object"}, "OpenAPI"), **errors(500)},
                }
            },
        },
    }
