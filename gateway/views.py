"""Thin handlers: parse HTTP, ask the fencer, shape the answer. No fencing decision lives here.

What a caller may see is decided here, where its key is known: a resource name reaches a caller only
if its API key's scope covers that name (docs/security.md, "What a key sees"). A key belongs to the
resource its first write named, which may lie outside the scope of a caller whose scope covers the
key: such a caller reads the bytes and lists the key, with no `Fencing-Resource` header and
`resource: null`, and a request of its that names another resource is 409 `resource_mismatch` with
`object_resource: null`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Iterator

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from gateway.app_keys import AppKeys, RequestKeys
from gateway.auth import Access
from gateway.errors import (
    HiddenBinding,
    MalformedRequest,
    NotAuthenticated,
    PayloadTooLarge,
    RequestTimeout,
    Unavailable,
)
from gateway.openapi import document
from gateway.parsing import (
    one_value,
    parse_content_type,
    parse_fence_resource,
    parse_idempotency_key,
    parse_key,
    parse_limit,
    parse_prefix,
    parse_resource,
    parse_token,
)
from gateway.preconditions import parse_precondition
from gateway.readiness import check_token_source
from storage.errors import BoundElsewhere, StorageError
from storage.fenced import digest_of
from storage.protocols import Caller, ObjectMeta, Precondition


def _authorize(request: web.Request, *names: str, access: Access) -> None:
    api_keys = request.app[AppKeys.api_keys]
    if api_keys is None:
        return
    header = one_value(request.headers, "Authorization")  # a proxy must not check another one
    key = request.get(RequestKeys.api_key)
    if key is None:  # identify again for the precise 401 message
        client = request.get(RequestKeys.client, "")
        if header is None and client.startswith("cert:"):
            raise NotAuthenticated(
                f"the client certificate's subject CN {client[5:]!r} names no API key; add one with "
                "`fencegate keys add NAME` named after it, or send `Authorization: Bearer <key>`"
            )
        key = api_keys.identify(header)
    api_keys.require(key, *names, access=access)


def _shown(request: web.Request, resource: str) -> str | None:
    """`resource` if the caller may see that name: its key's scope covers it (as if the caller had named
    it itself), or the gateway is open; else None."""
    if request.app[AppKeys.api_keys] is None:
        return resource
    key = request.get(RequestKeys.api_key)
    return resource if key is not None and key.allows(resource) else None


@contextlib.contextmanager
def _binding_in_scope(request: web.Request) -> Iterator[None]:
    """A `BoundElsewhere` as it is, if the caller may see the resource the key belongs to; else
    `HiddenBinding`: the same answer without that resource's name."""
    try:
        yield
    except BoundElsewhere as exc:
        if _shown(request, exc.bound) is not None:
            raise
        api_key = request.get(RequestKeys.api_key)
        name = "" if api_key is None else api_key.name
        raise HiddenBinding(
            f"key {exc.key!r} belongs to another resource than {exc.resource!r}, one outside the prefixes of "
            f"API key {name!r}, so it is not named here: a key is fenced by the mark of its "
            "own resource only and never moves to another one (not even after a delete); write it with a "
            "key whose scope covers its resource, sending that resource's name and a token of its lock, or "
            "ask the operator which resource it belongs to",
            fields={"key": exc.key, "resource": exc.resource, "object_resource": None},
        ) from exc


def _caller(
    request: web.Request,
    *,
    key: str,
    resource: str,
    token: int,
    data: bytes = b"",
    content_type: str = "",
    precondition: Precondition | None = None,
) -> Caller:
    """The audit and idempotency identity of a fenced request; a retry must match `request_digest`.

    The digest covers the stored `Content-Type` too (a GET answers with it), and the client's
    precondition when there is one (the same key on a write conditional on another version is
    another request). Records written before the Content-Type was covered hold the digest without
    it, so a retry also carries that one (`legacy_digest`) and still matches a record from before an
    upgrade.
    """
    client = request.get(RequestKeys.client) or f"ip:{request.remote}"
    if request.method in ("GET", "HEAD"):  # a read has no outcome to replay
        return Caller(client=client)
    idempotency_key = parse_idempotency_key(one_value(request.headers, "Idempotency-Key"))
    if idempotency_key is None:
        return Caller(client=client)
    fields = f"{request.method}\n{key}\n{resource}\n{token}\n{digest_of(data)}"
    if precondition is not None:  # absent before preconditions existed: those digests are unchanged
        fields += f"\nif-match {precondition.if_match}\nif-none-match {precondition.if_none_match}"
    return Caller(
        client=client,
        idempotency_key=idempotency_key,
        request_digest=hashlib.sha256(f"{fields}\n{content_type}".encode()).hexdigest(),
        legacy_digest=hashlib.sha256(fields.encode()).hexdigest(),
    )


async def _read_body(request: web.Request) -> bytes:
    """The whole body, within the idle timeout: a client trickling its body cannot hold a slot."""
    settings = request.app[AppKeys.settings]
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":  # aiohttp would inflate it, and keeps a gzip stream cut short as if whole
        raise MalformedRequest(
            f"Content-Encoding {encoding[:40]!r} is not accepted: send the body uncompressed, as it is to be "
            "stored; nothing was written"
        )
    limit = settings.max_body
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"the body is {request.content_length} bytes; the limit is {limit}")
    try:
        if request.content.is_eof():  # the whole body came with the headers: no timer needed
            return await request.read()
        async with asyncio.timeout(settings.idle_timeout):
            return await request.read()
    except TimeoutError as exc:
        raise RequestTimeout(
            f"the body did not arrive within {settings.idle_timeout}s; nothing was written, send it again"
        ) from exc
    except ConnectionResetError as exc:  # the client's doing, not the gateway's: a 4xx, never a 500
        raise MalformedRequest(
            "the connection closed before the whole body arrived; nothing was written, send it again"
        ) from exc
    except RequestPayloadError as exc:  # a body the HTTP parser could not read (bad chunked framing)
        raise MalformedRequest("the body could not be read as sent; nothing was written") from exc


def _accepted_headers(meta: ObjectMeta, *, resource: str | None) -> dict[str, str]:
    """The headers of an answer about `meta`; `Fencing-Resource` only if the caller may see it."""
    headers = {} if resource is None else {"Fencing-Resource": resource}
    if meta.token is not None:
        headers["Fencing-Token"] = str(meta.token)
    if meta.etag is not None:  # the upstream store's own tag: what an If-Match is compared with
        headers["ETag"] = meta.etag
    elif meta.digest is not None:
        headers["ETag"] = f'"{meta.digest}"'
    return headers


def _meta_body(meta: ObjectMeta, *, resource: str | None) -> dict[str, object]:
    return {
        "key": meta.key,
        "resource": resource,
        "token": meta.token,
        "version": meta.version,
        "size": meta.size,
    }


def _fenced_target(request: web.Request, *, required: bool) -> tuple[str, str, int | None]:
    key = parse_key(request.match_info["key"])
    resource = parse_resource(one_value(request.headers, "Fencing-Resource"), key=key)
    # Anything that can move a mark needs write access: a fenced read raises it too.
    raw_token = one_value(request.headers, "Fencing-Token")
    writes = required or raw_token is not None
    _authorize(request, key, resource, access="write" if writes else "read")  # before the token
    return key, resource, parse_token(raw_token, required=required)


async def put_object(request: web.Request) -> web.Response:
    key, resource, token = _fenced_target(request, required=True)
    assert token is not None
    content_type = parse_content_type(request.headers.get("Content-Type"))
    precondition = parse_precondition(request.headers)
    data = await _read_body(request)
    caller = _caller(
        request, key=key, resource=resource, token=token, data=data, content_type=content_type,
        precondition=precondition,
    )  # fmt: skip
    with _binding_in_scope(request):
        meta = await request.app[AppKeys.fencer].put(
            key, data, resource=resource, token=token, caller=caller, content_type=content_type,
            precondition=precondition,
        )  # fmt: skip
    shown = _shown(request, meta.resource)
    return web.json_response(
        _meta_body(meta, resource=shown),
        status=201 if meta.created else 200,
        headers=_accepted_headers(meta, resource=shown),
    )


async def get_object(request: web.Request) -> web.Response:
    key, resource, token = _fenced_target(request, required=False)
    caller = _caller(request, key=key, resource=resource, token=token or 0)
    with _binding_in_scope(request):
        found = await request.app[AppKeys.fencer].get(key, resource=resource, token=token, caller=caller)
    # a plain read answers with the resource the key belongs to, which the caller did not name
    headers = _accepted_headers(found.meta, resource=_shown(request, found.meta.resource))
    if found.meta.version is not None:
        headers["Object-Version"] = str(found.meta.version)
    headers["Content-Type"] = found.content_type  # as the writer sent it, parameters included
    return web.Response(body=found.data, headers=headers)


async def delete_object(request: web.Request) -> web.Response:
    key, resource, token = _fenced_target(request, required=True)
    assert token is not None
    precondition = parse_precondition(request.headers)
    caller = _caller(request, key=key, resource=resource, token=token, precondition=precondition)
    with _binding_in_scope(request):
        meta = await request.app[AppKeys.fencer].delete(
            key, resource=resource, token=token, caller=caller, precondition=precondition
        )
    shown = _shown(request, meta.resource)
    return web.json_response(
        _meta_body(meta, resource=shown), headers=_accepted_headers(meta, resource=shown)
    )


async def list_objects(request: web.Request) -> web.Response:
    prefix = parse_prefix(request.query.get("prefix"))
    after = parse_prefix(request.query.get("after"))
    limit = parse_limit(request.query.get("limit"))
    _authorize(request, prefix, access="read")
    found = await request.app[AppKeys.store].list(prefix, after=after, limit=limit)
    return web.json_response(
        {
            "prefix": prefix,
            "objects": [_meta_body(meta, resource=_shown(request, meta.resource)) for meta in found],
            "next": found[-1].key if len(found) == limit else None,
        }
    )


async def get_fence(request: web.Request) -> web.Response:
    resource = parse_fence_resource(request.match_info["resource"])
    _authorize(request, resource, access="read")
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
