"""A fenced request's body, read once the caller is authorized, and the identity its retries match.

The body is read within the idle timeout and the size limit, so a client
trickling its body cannot hold a slot. A request with an `Idempotency-Key`
is identified by a digest of everything it asks (`request_digest`): a retry
under the same key must ask the same.
"""

from __future__ import annotations

import asyncio
import hashlib

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from gateway.app_keys import AppKeys, RequestKeys
from gateway.errors import MalformedRequest, PayloadTooLarge, RequestTimeout
from gateway.parsing import Asked
from storage.fenced import digest_of
from storage.protocols import Caller


async def read_body(request: web.Request) -> bytes:
    """The whole body, uncompressed as it is to be stored, within the size limit and the idle timeout."""
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


def caller_of(request: web.Request, asked: Asked, token: int | None, data: bytes = b"") -> Caller:
    """The audit and idempotency identity of a fenced request; a retry must match `request_digest`.

    The digest covers the stored `Content-Type` too (a GET answers with it), and the client's
    precondition when there is one (the same key on a write conditional on another version is
    another request). Records written before the Content-Type was covered hold the digest without
    it, so a retry also carries that one (`legacy_digest`) and still matches a record from before an
    upgrade.
    """
    client = request.get(RequestKeys.client) or f"ip:{request.remote}"
    if asked.idempotency_key is None:  # a read has none: it has no outcome to replay
        return Caller(client=client)
    fields = f"{request.method}\n{asked.key}\n{asked.resource}\n{token or 0}\n{digest_of(data)}"
    precondition = asked.precondition
    if precondition is not None:  # absent before preconditions existed: those digests are unchanged
        fields += f"\nif-match {precondition.if_match}\nif-none-match {precondition.if_none_match}"
    return Caller(
        client=client,
        idempotency_key=asked.idempotency_key,
        request_digest=hashlib.sha256(f"{fields}\n{asked.content_type}".encode()).hexdigest(),
        legacy_digest=hashlib.sha256(fields.encode()).hexdigest(),
    )
