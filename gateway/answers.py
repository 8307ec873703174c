"""The answers about an object: its JSON body and headers, with a resource name only the caller may see.

A write answers with the resource it named, which its caller is authorized on
(a key bound to another resource is refused, `gateway.middlewares`). A read or
a listing names the resource a key belongs to only if the caller's key covers
it (`Credentials.shown`); `resource` is None otherwise, and the answer has no
`Fencing-Resource` header.
"""

from __future__ import annotations

from aiohttp import web

from storage.protocols import ObjectData, ObjectMeta


def meta_headers(meta: ObjectMeta, *, resource: str | None) -> dict[str, str]:
    """The headers of an answer about `meta`; `Fencing-Resource` only if the caller may see it."""
    headers = {} if resource is None else {"Fencing-Resource": resource}
    if meta.token is not None:
        headers["Fencing-Token"] = str(meta.token)
    if meta.etag is not None:  # the upstream store's own tag: what an If-Match is compared with
        headers["ETag"] = meta.etag
    elif meta.digest is not None:
        headers["ETag"] = f'"{meta.digest}"'
    return headers


def meta_body(meta: ObjectMeta, *, resource: str | None) -> dict[str, object]:
    return {
        "key": meta.key,
        "resource": resource,
        "token": meta.token,
        "version": meta.version,
        "size": meta.size,
    }


def written(meta: ObjectMeta, *, status: int = 200) -> web.Response:
    """The answer to an accepted PUT or DELETE."""
    return web.json_response(
        meta_body(meta, resource=meta.resource),
        status=status,
        headers=meta_headers(meta, resource=meta.resource),
    )


def object_read(found: ObjectData, *, resource: str | None) -> web.Response:
    """The answer to a GET: the bytes, with the `Content-Type` the writer sent, parameters included."""
    headers = meta_headers(found.meta, resource=resource)
    if found.meta.version is not None:
        headers["Object-Version"] = str(found.meta.version)
    headers["Content-Type"] = found.content_type
    return web.Response(body=found.data, headers=headers)
