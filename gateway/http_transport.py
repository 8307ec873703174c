"""The http(s) transport of the conditional proxy: RFC 9110 preconditions on the upstream's strong ETags.

`--upstream http(s)://... --upstream-ordering conditional` runs the same
algorithm as the S3 mode (`gateway.conditional.ConditionalStore`) over this
transport. A write is `PUT` with `If-Match: <strong ETag>` of the version the
gateway compared against, or `If-None-Match: *` for a key that holds
nothing; the upstream's 412 is `VersionChanged`. The upstream must give
a strong ETag in the answer to every PUT, HEAD and GET (RFC 9110 8.8.3): a
weak one (`W/"..."`) names a class of representations, not one version, so
it is never sent as `If-Match` on a write, and the probe refuses an upstream
that gives one.

An http upstream keeps no metadata of ours, so each version's token,
resource and tombstone flag are recorded in the gateway's database by the
ETag the upstream gave it (`storage.upstream_versions`: the row is written
before the PUT is sent, its ETag after the 2xx). A version under an ETag no
row names carries the highest token recorded for the key (a write whose
answer is not recorded yet, or a write around the gateway): a request below
it is 409 `stale_token`, never written over it. A key the gateway never
wrote is token-less, as an S3 object without metadata is.

Errors, as the S3 transport maps them: no connection made is 503
`upstream_unavailable` (nothing applied); no answer in time, or a connection
lost once the request was sent, is 504 `upstream_timeout` (outcome unknown:
the row stays, without an ETag, and bounds the key's token); any other
answer is 502 `upstream_failed`. An upstream that cannot list gives 501.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from urllib.parse import quote

import aiohttp
from multidict import CIMultiDictProxy
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.conditional import ConditionalStore, ProxyMetrics
from gateway.config import Settings
from gateway.errors import NotSupported, Unavailable, UpstreamFailed, UpstreamTimeout
from gateway.metrics import Metrics
from gateway.probe import check_upstream
from gateway.transport import (
    RESOURCE,
    TOKEN,
    TOMBSTONE,
    TOMBSTONE_PREFIX,
    TOMBSTONE_SIZE,
    Listed,
    Version,
    VersionChanged,
)
from gateway.upstream import failure
from storage.models import DEFAULT_CONTENT_TYPE, MAX_ETAG_LENGTH
from storage.sql import SqlObjectStore
from storage.upstream_versions import forget, intend, lookup, record

log = logging.getLogger("gateway.upstream")


class HttpTransport:
    """`gateway.transport.Transport` over one http(s) base URL, its versions recorded in `engine`.

    `conditional=False` drops the preconditions from every write: the control
    the tests run to show their check catches an unfenced upstream.
    """

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        base_url: str,
        engine: AsyncEngine,
        timeout: float,
        conditional: bool = True,
    ) -> None:
        from lockclient.transport.endpoint import redact

        self._session = session
        self._base = base_url.rstrip("/")
        self._engine = engine
        self._timeout = timeout
        self._conditional = conditional
        self.keeps_metadata = False  # tokens are recorded by ETag in the gateway's database instead
        self.where = redact(self._base)

    async def _send(
        self, method: str, key: str, *, data: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> tuple[int, CIMultiDictProxy[str], bytes]:
        url = f"{self._base}/{quote(key, safe='/')}"
        fields = {"upstream": self.where, "key": key}
        try:
            async with asyncio.timeout(self._timeout):
                async with self._session.request(method, url, data=data, headers=headers) as resp:
                    return resp.status, resp.headers, await resp.read()
        except aiohttp.ClientConnectorError as exc:
            raise Unavailable(
                f"the upstream is unreachable ({exc}); the request was not applied, retry",
                code="upstream_unavailable", fields=fields,
            ) from exc  # fmt: skip
        except (TimeoutError, aiohttp.ClientConnectionError, OSError) as exc:
            raise UpstreamTimeout(
                f"no upstream answer to {method} {key!r} within {self._timeout}s; its outcome is unknown",
                fields=fields,
            ) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamFailed(
                f"the upstream answered {method} {key!r} badly: {exc}", fields=fields
            ) from exc

    def _etag(self, method: str, key: str, headers: CIMultiDictProxy[str]) -> str:
        etag = headers.get("ETag")
        if etag is None or not 2 <= len(etag) <= MAX_ETAG_LENGTH:
            raise UpstreamFailed(
                f"the upstream answered {method} {key!r} without a usable ETag",
                fields={"upstream": self.where, "key": key},
            )
        return etag

    async def _version(self, key: str, etag: str, headers: CIMultiDictProxy[str], size: int) -> Version:
        known = await lookup(self._engine, key=key, etag=etag)
        content_type = headers.get("Content-Type", DEFAULT_CONTENT_TYPE)
        if known is None:
            return Version(etag, None, None, False, size, content_type)
        return Version(etag, known.token, known.resource, known.tombstone, size, content_type)

    async def head(self, key: str) -> Version | None:
        status, headers, _ = await self._send("HEAD", key)
        if status == 404:
            return None
        if not 200 <= status < 300:
            raise failure("HEAD", key, status, where=self.where)
        size = headers.get("Content-Length", "0")
        return await self._version(
            key, self._etag("HEAD", key, headers), headers, int(size) if size.isdigit() else 0
        )

    async def get(self, key: str) -> tuple[Version, bytes] | None:
        status, headers, body = await self._send("GET", key)
        if status == 404:
            return None
        if not 200 <= status < 300:
            raise failure("GET", key, status, where=self.where)
        version = await self._version(key, self._etag("GET", key, headers), headers, len(body))
        if not version.tombstone and len(body) == TOMBSTONE_SIZE and body.startswith(TOMBSTONE_PREFIX):
            version = Version(version.etag, version.token, version.resource, True, version.size)
        return version, body

    async def put_if(
        self, key: str, data: bytes, *, content_type: str, metadata: Mapping[str, str], match: str | None
    ) -> str:
        if match is not None and match.startswith("W/"):
            raise UpstreamFailed(
                f"the upstream gave {key!r} a weak ETag: it cannot make a write conditional",
                fields={"upstream": self.where, "key": key},
            )
        token = int(metadata[TOKEN])
        row = await intend(
            self._engine, key=key, token=token, resource=metadata[RESOURCE], tombstone=TOMBSTONE in metadata
        )
        headers = {"Content-Type": content_type}
        if self._conditional:
            headers.update({"If-None-Match": "*"} if match is None else {"If-Match": match})
        try:
            status, answer, _ = await self._send("PUT", key, data=data, headers=headers)
        except Unavailable:
            await forget(self._engine, row)  # no connection: nothing was sent
            raise
        if status == 412:
            await forget(self._engine, row)
            raise VersionChanged(key)
        if not 200 <= status < 300:
            # the row stays: what the upstream did is unknown
            raise failure("PUT", key, status, where=self.where)
        etag = self._etag("PUT", key, answer)
        await record(self._engine, row, key=key, etag=etag, token=token)
        return etag

    async def delete_if(self, key: str, *, match: str) -> None:
        status, _, _ = await self._send(
            "DELETE", key, headers={"If-Match": match} if self._conditional else {}
        )
        if status == 412:
            raise VersionChanged(key)
        if not (200 <= status < 300 or status == 404):
            raise failure("DELETE", key, status, where=self.where)

    async def list(self, prefix: str, *, after: str, limit: int) -> list[Listed]:
        raise NotSupported("listing is not available with an http(s) upstream: list on the upstream itself")


async def conditional_http_store(
    settings: Settings,
    *,
    fences: SqlObjectStore,
    engine: AsyncEngine,
    session: aiohttp.ClientSession,
    metrics: Metrics,
    conditional: bool = True,
) -> ConditionalStore:
    """The conditional store over the http(s) upstream, once it passed the probe (else `ProbeFailed`);
    `conditional=False` is the tests' control (no preconditions, no probe)."""
    assert settings.upstream is not None
    transport = HttpTransport(
        session=session, base_url=settings.upstream, engine=engine, timeout=settings.upstream_timeout,
        conditional=conditional,
    )  # fmt: skip
    if not conditional:
        log.warning(
            "THE UPSTREAM'S PRECONDITIONS ARE OFF (a test's control, not probed): stale writes can land"
        )
        return ConditionalStore(fences=fences, transport=transport, metrics=ProxyMetrics(metrics.registry))
    checks = await check_upstream(transport)
    log.info(
        "upstream %s: every write a PUT conditional on the version checked (If-Match on its strong ETag, "
        "If-None-Match: *), each version's token recorded by its ETag, deletes leave tombstones; passed "
        "the conditional-write probe: %s",
        transport.where,
        ", ".join(c.name for c in checks),
    )
    return ConditionalStore(fences=fences, transport=transport, metrics=ProxyMetrics(metrics.registry))
