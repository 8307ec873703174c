"""Thin handlers: read the request, authorize it, ask the fencer, shape the answer.

A fenced request reads top to bottom: its path and headers (`gateway.parsing.read_fenced`), the
caller's access to what they name (`Credentials.authorize`), its body and identity (`gateway.body`),
then the fencer (`gateway.fencing.Fencer`). No fencing decision lives here.

A resource name reaches a caller only if its API key's scope covers that name (`Credentials.shown`;
docs/security.md, "What a key sees"). A key belongs to the resource its first write named, which may
lie outside the scope of a caller whose scope covers the key: such a caller reads the bytes and lists
the key, with no `Fencing-Resource` header and `resource: null`, and a request of its that names
another resource is 409 `resource_mismatch` with `object_resource: null` (`gateway.middlewares`).
A write answers with the resource it named, which its caller is authorized on.
"""

from __future__ import annotations

import contextlib

from aiohttp import web

from gateway.answers import meta_body, object_read, written
from gateway.app_keys import AppKeys, RequestKeys
from gateway.auth import Credentials
from gateway.body import caller_of, read_body
from gateway.errors import Unavailable
from gateway.fencing import Fencer
from gateway.fencing_token import parse_token
from gateway.openapi import document
from gateway.parsing import parse_fence_resource, parse_limit, parse_prefix, read_fenced
from gateway.readiness import check_token_source
from storage.errors import StorageError


async def put_object(request: web.Request) -> web.Response:
    asked = read_fenced(request)
    credentials: Credentials = request[RequestKeys.credentials]
    credentials.authorize(asked.key, asked.resource, access=asked.access)
    token = parse_token(asked.raw_token, required=True)
    assert token is not None
    data = await read_body(request)
    caller = caller_of(request, asked, token, data)
    fencer: Fencer = request.app[AppKeys.fencer]
    meta = await fencer.put(
        asked.key, data, resource=asked.resource, token=token, caller=caller,
        content_type=asked.content_type, precondition=asked.precondition,
    )  # fmt: skip
    return written(meta, status=201 if meta.created else 200)


async def get_object(request: web.Request) -> web.Response:
    asked = read_fenced(request)
    credentials: Credentials = request[RequestKeys.credentials]
    credentials.authorize(asked.key, asked.resource, access=asked.access)
    token = parse_token(asked.raw_token, required=False)
    fencer: Fencer = request.app[AppKeys.fencer]
    found = await fencer.get(
        asked.key, resource=asked.resource, token=token, caller=caller_of(request, asked, token)
    )
    # a plain read answers with the resource the key belongs to, which the caller did not name
    return object_read(found, resource=credentials.shown(found.meta.resource))


async def delete_object(request: web.Request) -> web.Response:
    asked = read_fenced(request)
    credentials: Credentials = request[RequestKeys.credentials]
    credentials.authorize(asked.key, asked.resource, access=asked.access)
    token = parse_token(asked.raw_token, required=True)
    assert token is not None
    caller = caller_of(request, asked, token)
    fencer: Fencer = request.app[AppKeys.fencer]
    meta = await fencer.delete(
        asked.key, resource=asked.resource, token=token, caller=caller, precondition=asked.precondition
    )
    return written(meta)


async def list_objects(request: web.Request) -> web.Response:
    prefix = parse_prefix(request.query.get("prefix"))
    after = parse_prefix(request.query.get("after"))
    limit = parse_limit(request.query.get("limit"))
    credentials: Credentials = request[RequestKeys.credentials]
    credentials.authorize(prefix, access="read")
    found = await request.app[AppKeys.store].list(prefix, after=after, limit=limit)
    return web.json_response(
        {
            "prefix": prefix,
            "objects": [meta_body(meta, resource=credentials.shown(meta.resource)) for meta in found],
            "next": found[-1].key if len(found) == limit else None,
        }
    )


async def get_fence(request: web.Request) -> web.Response:
    resource = parse_fence_resource(request.match_info["resource"])
    request[RequestKeys.credentials].authorize(resource, access="read")
    highest = await request.app[AppKeys.store].mark(resource)
    return web.json_response({"resource": resource, "highest": highest})


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    if request.app[AppKeys.drain].draining:
        raise Unavailable("the gateway is shutting down", code="shutting_down")
    readiness = request.app[AppKeys.readiness]
    try:
        await request.app[AppKeys.store].ping()
        tokens = request.app[AppKeys.tokens]
        if tokens is not None:
            await check_token_source(tokens)
        replica = request.app[AppKeys.replica]
        if replica is not None:
            replica.check()
    except Exception:
        readiness.failed()
        raise
    readiness.passed()
    ordering = request.app[AppKeys.settings].upstream_ordering
    return web.json_response(
        {"status": "ready"} if ordering is None else {"status": "ready", "upstream_ordering": ordering}
    )


async def metrics(request: web.Request) -> web.Response:
    registry = request.app[AppKeys.metrics]
    # The scrape still answers when storage is down; the gauge keeps its last value.
    with contextlib.suppress(StorageError):
        registry.marks.set(await request.app[AppKeys.store].marks_count())
    return web.Response(body=registry.render(), content_type="text/plain", charset="utf-8")


async def openapi(request: web.Request) -> web.Response:
    max_body, store = request.app[AppKeys.settings].max_body, request.app[AppKeys.store]
    return web.json_response(document(max_body=max_body, preconditions=store.preconditions))
