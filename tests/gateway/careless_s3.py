"""A real HTTP server speaking just enough S3 for the probe, that gets conditional writes wrong on purpose.

It is what the probe exists for: an emulator that ignores `If-None-Match`,
one that ignores `If-Match`, one that checks the precondition and writes in
two steps with an await between them (so concurrent PUTs on one ETag all
win: a checked conditional PUT waits, up to `HOLD` seconds, until another
has passed the same check, so the race happens however the machine
schedules the probe's requests). It checks no signature; the probe never needs one to fail. With fault
"none" it does them right (one event loop, no await between check and
write), and `garbage` then makes every object request answer what no S3
store would: a 2xx without an ETag, a token that is no number.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Literal

from aiohttp import web

Fault = Literal["none", "ignores-if-none-match", "ignores-if-match", "not-atomic"]
HOLD = 2.0  # seconds a checked conditional PUT waits for a second one (not-atomic)
_ERROR = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>m</Message></Error>'


class CarelessS3:
    """Objects in a dict: key -> (ETag, body, metadata headers)."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.garbage = False
        self.objects: dict[str, tuple[str, bytes, dict[str, str]]] = {}
        self._checked: dict[str, asyncio.Event] = {}  # not-atomic: a key's checked PUT waiting for company
        self.app = web.Application()
        self.app.router.add_route("*", "/{bucket}", self.bucket)
        self.app.router.add_route("*", "/{bucket}/{key:.+}", self.handle)

    async def bucket(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def handle(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        found = self.objects.get(key)
        if self.garbage:
            if request.method == "HEAD":
                return web.Response(headers={"ETag": '"x"', "x-amz-meta-fencing-token": "twelve"})
            return web.Response(status=200, text="<html>not S3</html>")
        if request.method == "HEAD":
            if found is None:
                return web.Response(status=404)
            etag, body, meta = found
            return web.Response(headers={"ETag": etag, "Content-Length": str(len(body)), **meta})
        if request.method == "DELETE":
            if not self._matches(request, found, "If-Match"):
                return _failed()
            self.objects.pop(key, None)
            return web.Response(status=204)
        if request.method != "PUT":
            return web.Response(status=405)
        body = await request.read()
        found = self.objects.get(key)  # as it is now, after the body arrived
        if not self._matches(request, found, "If-None-Match") or not self._matches(
            request, found, "If-Match"
        ):
            return _failed()
        if self.fault == "not-atomic" and "If-Match" in request.headers:
            await self._wait_for_company(key)  # checked, then written: concurrent PUTs saw one ETag
        etag = '"' + hashlib.md5(body, usedforsecurity=False).hexdigest() + '"'
        meta = {
            name: value for name, value in request.headers.items() if name.lower().startswith("x-amz-meta-")
        }
        self.objects[key] = (etag, body, meta)
        return web.Response(headers={"ETag": etag})

    async def _wait_for_company(self, key: str) -> None:
        """Hold this checked PUT until a second one passed the same check (then both write)."""
        waiting = self._checked.pop(key, None)
        if waiting is not None:
            waiting.set()
            return
        company = self._checked[key] = asyncio.Event()
        try:
            await asyncio.wait_for(company.wait(), HOLD)
        except TimeoutError:
            if self._checked.get(key) is company:
                del self._checked[key]

    def _matches(
        self, request: web.Request, found: tuple[str, bytes, dict[str, str]] | None, header: str
    ) -> bool:
        wanted = request.headers.get(header)
        if wanted is None:
            return True
        if header == "If-None-Match":
            return self.fault == "ignores-if-none-match" or found is None
        return self.fault == "ignores-if-match" or (found is not None and found[0] == wanted)


def _failed() -> web.Response:
    return web.Response(
        status=412, text=_ERROR.format(code="PreconditionFailed"), content_type="application/xml"
    )
