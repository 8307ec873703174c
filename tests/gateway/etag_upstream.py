"""A real HTTP store for the conditional http proxy: bytes per path, strong ETags, RFC 9110 preconditions.

Each write makes a new version with a strong ETag of its own (a counter and
the body's digest). `PUT` honours `If-Match` (the current ETag, or 412) and
`If-None-Match: *` (nothing there, or 412); `DELETE` honours `If-Match`. The
check and the write happen under one asyncio lock, after the body arrived,
so concurrent conditional PUTs on one ETag give exactly one 2xx. `writes`
keeps what each PUT and DELETE was answered, in order: a test reads there
the fate of a write whose answer its connection lost.

The faults are what the probe exists to refuse: `ignores-if-match` writes
whatever arrives; `weak-etags` answers with `W/` ETags.

`python -m tests.gateway.etag_upstream [--fault F]` serves on a free
loopback port and prints `port N` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import sys
from collections.abc import AsyncIterator
from typing import Literal

from aiohttp import web

Fault = Literal["none", "ignores-if-match", "weak-etags"]


class EtagUpstream:
    """Objects in a dict: path -> (ETag, body, Content-Type)."""

    def __init__(self, fault: Fault = "none") -> None:
        self.fault = fault
        self.objects: dict[str, tuple[str, bytes, str]] = {}
        self.writes: list[tuple[str, str, int]] = []  # method, key, the status it was answered
        self._versions = itertools.count(1)
        self._lock = asyncio.Lock()
        self.app = web.Application()
        self.app.router.add_route("*", "/{key:.+}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        body = await request.read()
        async with self._lock:
            answer = self._answer(request, key, body)
            if request.method in ("PUT", "DELETE"):
                self.writes.append((request.method, key, answer.status))
            return answer

    def _answer(self, request: web.Request, key: str, body: bytes) -> web.Response:
        """The answer to `request`, decided and applied under the store's lock."""
        found = self.objects.get(key)
        if request.method in ("GET", "HEAD"):
            if found is None:
                return web.Response(status=404)
            etag, data, content_type = found
            return web.Response(body=data, headers={"ETag": etag, "Content-Type": content_type})
        if not self._matches(request, found):
            return web.Response(status=412)
        if request.method == "DELETE":
            if found is None:
                return web.Response(status=404)
            del self.objects[key]
            return web.Response(status=204)
        if request.method != "PUT":
            return web.Response(status=405)
        digest = hashlib.sha256(body).hexdigest()[:16]
        etag = f'{"W/" if self.fault == "weak-etags" else ""}"{next(self._versions)}-{digest}"'
        self.objects[key] = (etag, body, request.headers.get("Content-Type", "application/octet-stream"))
        return web.Response(status=201 if found is None else 200, headers={"ETag": etag})

    def _matches(self, request: web.Request, found: tuple[str, bytes, str] | None) -> bool:
        if self.fault == "ignores-if-match" and "If-Match" in request.headers:
            return True
        if request.headers.get("If-None-Match") == "*" and found is not None:
            return False
        wanted = request.headers.get("If-Match")
        return wanted is None or (found is not None and found[0] == wanted and not wanted.startswith("W/"))


async def _serve(fault: Fault) -> None:
    runner = web.AppRunner(EtagUpstream(fault).app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert site._server is not None
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    print(f"port {port}", flush=True)
    await asyncio.Event().wait()


@contextlib.asynccontextmanager
async def started(fault: Fault = "none") -> AsyncIterator[str]:
    """The store as a real process on a loopback port: its base URL while the block runs."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.gateway.etag_upstream", "--fault", fault, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30.0)
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        await proc.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", default="none", choices=("none", "ignores-if-match", "weak-etags"))
    asyncio.run(_serve(parser.parse_args().fault))
