"""`GatewayClient`: the aiohttp client of the fencing gateway.

Every fenced call takes `lease=` (anything with `token` and `resource`, a
`lockclient.protocols.Fenced`) and sends them as `Fencing-Token` and
`Fencing-Resource`. A lease that can tell it is lost (a `Lease`) is checked
first: a lost one raises `LockLost` and nothing is sent. A 409 is raised as
`StaleToken` carrying the mark that refused it: the caller's lease is no
longer the newest and must not write again. Every other error code of the
API has its own `GatewayError` subclass (`NotFound` for a missing object,
`ResourceMismatch`, `TokenFromTheFuture`, `BadRequest`, ...;
`lockclient.errors`).

A 5xx (but 501), a timeout or a connection dropped mid-request means the
outcome is unknown, never that the write happened. Every write carries an
`Idempotency-Key` (the caller's, or one made per call), and such a request
is sent again with the same key a few times (`GatewayRetry`): the gateway
applies it once and answers the first outcome to every retry. When the
retries run out, `OutcomeUnknown` carries the key for a later retry.

A key (or a resource in a path) is sent exactly as named: percent-encoded
once, in a URL marked as encoded so nothing normalises it on the way out. A
key with a `.` or `..` segment is refused (`ConfigurationError`, nothing
sent): a URL resolves such segments, so `a/x/../b` would reach `a/b`, another
object; the gateway refuses those keys too.

What the HTTP API would refuse in a header is refused here, by its own rules
(`lockclient.wire`), before anything is sent (`ConfigurationError`): a token
that is not an `int` in 1..2^63-1 (no `bool`, `float` or `str`), a resource that is not a name of the API
(segments of `A-Za-z0-9_.~:@=+%-` joined by single slashes, at most 256
characters), an `Idempotency-Key` outside 1..128 printable ASCII characters
without spaces or commas, and data that is not bytes. Messages name the
gateway without its password.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Mapping
from types import MappingProxyType, TracebackType
from typing import Any, Unpack

import aiohttp
from yarl import URL

from lockclient.config import require_positive
from lockclient.errors import ConfigurationError, GatewayError, LockLost, OutcomeUnknown
from lockclient.gateway_retry import DEFAULT_GATEWAY_RETRY, GatewayRetry, gave_up
from lockclient.gateway_tls import TLSPath, tls_context, tls_failure
from lockclient.gateway_types import (
    Fencing,
    FetchedObject,
    ObjectInfo,
    OnSend,
    Send,
    WriteOptions,
    check_fenced,
    info_from,
)
from lockclient.http_errors import error_for
from lockclient.options import check_options
from lockclient.protocols import Fenced
from lockclient.transport.endpoint import is_http_url, redact
from lockclient.wire import (
    FENCING_RESOURCE,
    FENCING_TOKEN,
    IDEMPOTENCY_KEY,
    IF_MATCH,
    OBJECT_VERSION,
    idempotency_key_header,
    if_match_header,
    in_path,
    int_header,
    resource_header,
    token_header,
)

DEFAULT_TIMEOUT = 30.0  # seconds for one request, connect included
log = logging.getLogger(__name__)


class GatewayClient:
    """Talks to one gateway; `async with` it, or call `aclose()`.

    Over `https://`, the gateway's certificate is verified against
    `ssl_ca_certs` (a PEM file; the system's store when not given) and must
    name the URL's host; `ssl_certfile` and `ssl_keyfile` are the client
    certificate a gateway run with `--tls-client-ca` asks for. The names are
    redis-py's, as for the Redis masters. A handshake that fails raises
    `GatewayError` with code `"tls"` and the reason; it is never retried in
    plaintext.

    `retry` (default `GatewayRetry()`: 4 sends, 0.1 s doubling up to 2 s)
    resends unknown outcomes; every `put` and `delete` without an
    `idempotency_key` gets a fresh one (a UUID) for all its sends.
    `retry=None` sends each request once and makes no keys: for a gateway
    in proxy mode, which refuses `Idempotency-Key` (501).

    `on_send(Send)` is called after every send (each retry too), answered or not; what
    it raises is logged and ignored, so the call's outcome stays the gateway's.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        session: aiohttp.ClientSession | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        ssl_ca_certs: TLSPath | None = None,
        ssl_certfile: TLSPath | None = None,
        ssl_keyfile: TLSPath | None = None,
        retry: GatewayRetry | None = DEFAULT_GATEWAY_RETRY,
        on_send: OnSend | None = None,
    ) -> None:
        _check_base_url(base_url)
        # aiohttp reads a total of 0 (or less) as "no timeout": a hung gateway would hang every call
        require_positive("timeout", timeout, "give the seconds one request may take, e.g. 30")
        self._tls = tls_context(base_url, session, ssl_ca_certs, ssl_certfile, ssl_keyfile)
        # over TLS 1.3 a gateway that requires a client certificate closes the connection after
        # the handshake, which reaches the client as a plain disconnect: the message names the fix
        self._no_certificate_hint = (
            "; if the gateway requires client certificates (mutual TLS), give ssl_certfile and ssl_keyfile"
            if self._tls is not None and ssl_certfile is None
            else ""
        )
        self._base = base_url.rstrip("/")
        self._shown = redact(self._base)  # the gateway as messages name it: never with its password
        self._origin = str(URL(self._base))  # percent-encoded: each request's path is appended as it is
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session = session
        self._owns_session = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._retry = retry
        self._on_send = on_send

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session if this client opened it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _fencing(self, key: str, fencing: Fencing, *, required: bool) -> dict[str, str]:
        lease, token, resource = fencing.get("lease"), fencing.get("token"), fencing.get("resource")
        if lease is not None:
            if token is not None or resource is not None:
                raise ConfigurationError("pass either lease= or token=/resource=, not both")
            check_fenced(
                lease
            )  # a lease that knows it is lost (a `Lease`) raises `LockLost`: nothing is sent
            token, resource = lease.token, lease.resource
        if token is None:
            if required:
                raise ConfigurationError(f"writing {key!r} needs a fencing token: pass lease= (or token=)")
            return {}
        headers = {FENCING_TOKEN: token_header(token)}
        if resource is not None:
            headers[FENCING_RESOURCE] = resource_header(resource)
        return headers

    async def _send(
        self, method: str, path: str, *, headers: Mapping[str, str] | None = None, **kwargs: Any
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One request, reported to `on_send`; an answer of 400 or more raises the API's typed error."""
        sent, started = dict(headers or {}), time.monotonic()
        try:
            status, resp_headers, body = await self._exchange(method, path, sent, **kwargs)
        except GatewayError as exc:
            self._report(method, path, sent, started, failure=exc.code)
            raise
        self._report(
            method, path, sent, started, status=status, response_headers=resp_headers, response_body=body
        )
        if status >= 400:
            raise error_for(f"{method} {path}", status, resp_headers, body)
        return status, resp_headers, body

    def _report(self, method: str, path: str, sent: dict[str, str], started: float, **answer: Any) -> None:
        """Hand the send to `on_send` as a `Send`; what the hook raises is logged, and the call goes on."""
        if self._on_send is None:
            return
        send = Send(method=method, path=path, gateway=self._shown, headers=MappingProxyType(sent),
                    started=started, ended=time.monotonic(), **answer)  # fmt: skip
        try:
            self._on_send(send)
        except Exception:
            log.exception("on_send hook raised for %s %s; ignored", method, path)

    async def _exchange(
        self, method: str, path: str, headers: Mapping[str, str], **kwargs: Any
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One request, its failures translated: nothing sent (`code` "unreachable", "tls"), or
        `OutcomeUnknown` (a timeout, a dropped connection); any answer is returned as it came."""
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._tls) if self._tls is not None else None
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=connector)
        try:
            # `encoded=True`: the path is already percent-encoded (`in_path`); yarl would otherwise
            # requote it and resolve dot segments, sending a request for another name than the caller's
            url = URL(self._origin + path, encoded=True)
            async with self._session.request(
                method, url, headers={**self._headers, **headers}, **kwargs
            ) as resp:
                body = await resp.read()
                status, resp_headers = resp.status, resp.headers
        except TimeoutError as exc:
            raise OutcomeUnknown(
                f"{method} {path}: no answer within the timeout; the outcome is unknown",
                status=None,
                code="timeout",
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            why = tls_failure(exc)
            if why is not None:
                raise GatewayError(
                    f"{method} {path}: cannot connect to the gateway at {self._shown}: TLS: {why}; "
                    "nothing was sent",
                    status=None,
                    code="tls",
                ) from exc
            raise GatewayError(
                f"{method} {path}: cannot connect to the gateway at {self._shown} "
                f"({_hide(exc, self._base)}); nothing was sent",
                status=None,
                code="unreachable",
            ) from exc
        except aiohttp.ClientError as exc:
            raise OutcomeUnknown(
                f"{method} {path}: the connection to {self._shown} failed after the request may have been "
                f"sent ({_hide(exc, self._base) or type(exc).__name__}); the outcome is unknown"
                f"{self._no_certificate_hint}",
                status=None,
                code="disconnected",
            ) from exc
        return status, resp_headers, body

    async def _request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        lease: Fenced | None = None,
        idempotency_key: str | None = None,
        **kwargs: Any,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """`_send`, retried by the `GatewayRetry` while the outcome is unknown or nothing was sent.

        A write is retried only with its Idempotency-Key (the gateway then applies it once), and
        only while its lease (if it can tell) is not lost. An answer of the API (a 4xx) ends it.
        """
        retry = self._retry
        write = method in ("PUT", "DELETE")
        tries = 1 if retry is None or (write and idempotency_key is None) else retry.attempts
        unknown: OutcomeUnknown | None = None  # set once a send may have been applied
        failure: GatewayError
        for attempt in range(1, tries + 1):
            try:
                return await self._send(method, path, headers=headers, **kwargs)
            except OutcomeUnknown as exc:
                unknown = failure = exc
            except GatewayError as exc:
                if exc.code != "unreachable":
                    raise
                failure = exc
            if retry is None or attempt == tries:
                break
            await asyncio.sleep(retry.backoff(attempt - 1))
            if lease is not None:
                try:
                    check_fenced(lease)
                except LockLost as lost:
                    if unknown is None:
                        raise  # nothing was sent
                    raise gave_up(
                        unknown, idempotency_key, attempt, f"the lease was lost: {lost}", write=write
                    ) from lost
        if unknown is None:
            raise failure  # the gateway could not be reached: nothing was sent
        raise gave_up(unknown, idempotency_key, attempt, "no retry left", write=write) from failure

    @staticmethod
    def _object_path(key: str) -> str:
        return "/v1/objects/" + in_path("key", key)

    async def put(self, key: str, data: bytes, **options: Unpack[WriteOptions]) -> ObjectInfo:
        """Store `data` under `key`, fenced by the lease's token.

        Sent with `idempotency_key` (a new one per call when not given, unless
        `retry=None`): a retry of a write whose outcome was unknown answers the
        first outcome instead of writing twice. Raises `OutcomeUnknown` (with
        the key) when every send's outcome stayed unknown.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise ConfigurationError(
                f"data must be bytes, got {type(data).__name__}: encode text first, e.g. text.encode()"
            )
        status, resp_headers, body = await self._write("PUT", key, options, data=data)
        return info_from(json.loads(body), etag=resp_headers.get("ETag"), created=status == 201)

    async def get(self, key: str, **fencing: Unpack[Fencing]) -> FetchedObject:
        """Read `key`; with a lease it is a fenced read, which raises the mark.

        A missing key raises `NotFound` (a `LookupError`); a fenced read of
        one has raised the mark all the same.
        """
        check_options(fencing, where="get", known=Fencing.__optional_keys__)
        path = self._object_path(key)
        headers = self._fencing(key, fencing, required=False)
        _, resp_headers, body = await self._request("GET", path, headers=headers, lease=fencing.get("lease"))
        return FetchedObject(
            key=key,
            data=body,
            token=int_header(resp_headers, FENCING_TOKEN),
            version=int_header(resp_headers, OBJECT_VERSION),
            etag=resp_headers.get("ETag"),
        )

    async def delete(self, key: str, **options: Unpack[WriteOptions]) -> ObjectInfo:
        """Delete `key`, fenced by the lease's token; `idempotency_key` and retries as for `put`.

        A missing key raises `NotFound`.
        """
        _, resp_headers, body = await self._write("DELETE", key, options)
        return info_from(json.loads(body), etag=resp_headers.get("ETag"))

    async def _write(
        self, method: str, key: str, options: WriteOptions, **kwargs: Any
    ) -> tuple[int, Mapping[str, str], bytes]:
        """A fenced `PUT` or `DELETE` of `key`, sent with its Idempotency-Key."""
        check_options(options, where=method.lower(), known=WriteOptions.__optional_keys__)
        path = self._object_path(key)
        headers = self._fencing(key, options, required=True)
        once = self._key(options.get("idempotency_key"))
        if once is not None:
            idempotency_key_header(once)
        if (if_match := options.get("if_match")) is not None:
            headers[IF_MATCH] = if_match_header(if_match)
        return await self._request(
            method,
            path,
            headers=headers | _idempotent(once),
            lease=options.get("lease"),
            idempotency_key=once,
            **kwargs,
        )

    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with `prefix`, in key order (all pages)."""
        found: list[ObjectInfo] = []
        after = ""
        while True:
            _, _, body = await self._request("GET", "/v1/objects", params={"prefix": prefix, "after": after})
            page = json.loads(body)
            found.extend(info_from(item) for item in page["objects"])
            if page["next"] is None:
                return found
            after = page["next"]

    async def fence(self, resource: str) -> int:
        """The resource's current high-water mark (0 if no token was ever accepted)."""
        _, _, body = await self._request("GET", "/v1/fences/" + in_path("resource", resource))
        return int(json.loads(body)["highest"])

    def _key(self, given: str | None) -> str | None:
        """The write's Idempotency-Key: the caller's, else a new one (none with `retry=None`)."""
        if given is not None or self._retry is None:
            return given
        return uuid.uuid4().hex


def _hide(exc: BaseException, base: str) -> str:
    """`exc` in words, the gateway's URL in it without its password (aiohttp names the URL it tried)."""
    return str(exc).replace(base, redact(base))


def _idempotent(key: str | None) -> dict[str, str]:
    return {} if key is None else {IDEMPOTENCY_KEY: key}


def _check_base_url(base_url: str) -> None:
    """An http(s) URL with a host and, if given, a port that exists: anything else could never be sent,
    and would otherwise surface at the first request as an outcome unknown and be retried."""
    if not is_http_url(base_url):
        raise ConfigurationError(
            f"base_url {redact(base_url)!r} must be an http(s) URL with a host and a port from 1 to 65535, "
            "e.g. http://127.0.0.1:8080"
        )
