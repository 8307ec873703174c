"""Upstream proxy mode to an http(s) service, `--upstream-ordering trust-path`: fence, then forward.

For each fenced request the gateway takes the resource's in-process lock,
runs the fenced unit in its own database (the key's binding, the raised
mark and the audit entry; the bytes are upstream), commits, and only then
forwards the request; the lock is held until the upstream answered, so one gateway sends
a resource's requests to the upstream one at a time, in fence order.

The limit, which the setting's name states, the start-up line repeats and
docs/gateway.md explains: the upstream applies what arrives unconditionally,
so this is safe only if the path from the gateway to the upstream cannot
delay or reorder requests. A request that times out here may still arrive at
the upstream later, after a newer token's request; only a store that checks
the token or a precondition itself is safe against that. The per-resource
lock is per process, so one gateway per database runs in this mode
(`gateway.replica`); `exclusive` refuses each fenced request once that
replica's claim lapsed, before the fence moves.

An upstream failure is 502 (it answered an error, or an answer the gateway
cannot pass on), 503 (unreachable) or 504 (no answer in time), never a
success. The raised mark stays: the token was valid, and a mark never goes
down.

A GET's `Fencing-Token` (the writer's token, as the upstream states it) is
passed on only if the gateway would accept it from a client: one header, a
decimal integer in 1..2**63-1 (`gateway.fencing_token.token_or_none`). Anything
else is 502 `upstream_failed`, the value in the log only: a client must not
take a token the gateway itself would refuse for one it vouches for.

An https upstream's certificate is verified, host name included: against
the system's store, or with `--upstream-ca` against that CA alone
(`gateway.tls.upstream_context`). A handshake that fails
(untrusted, wrong host, expired) is 503 `upstream_unavailable` before any
byte of the request is sent; the reason is in the log, not the answer.
With `--upstream-cert`/`--upstream-key` the gateway presents that client
certificate; one the upstream refuses is 503 `upstream_unavailable` too
(with TLS 1.3 the upstream refuses it after the gateway's side of the
handshake, so the log may say only that the connection was reset).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from urllib.parse import quote

import aiohttp
from multidict import CIMultiDict

from gateway.errors import NotSupported, Unavailable, UpstreamFailed, UpstreamTimeout
from gateway.fencing_token import token_or_none
from lockclient.wire import MAX_TOKEN
from storage.errors import ObjectNotFound
from storage.fenced import digest_of
from storage.protocols import Caller, FencedRequest, ObjectData, ObjectMeta, ObjectStore, Refused
from storage.sql import SqlObjectStore

PROXY_LIMIT = (
    "--upstream-ordering trust-path: the upstream applies every forwarded write unconditionally, so this "
    "gateway does NOT protect against a request delayed or reordered on the path to it, nor against a "
    "request that timed out here (504) reaching it late, after a newer token's; the fence holds only "
    "while that path delivers in order; one replica per database (a second is refused at start)"
)


def failure(method: str, key: str, status: int, *, where: str) -> Exception:
    """The gateway's error for an http(s) upstream's error answer: its 503 and 504 as they are, else 502;
    `where` names the upstream in the log."""
    fields = {"upstream": where, "key": key, "upstream_status": str(status)}
    if status == 503:
        return Unavailable("the upstream is unavailable (503)", code="upstream_unavailable", fields=fields)
    if status == 504:
        return UpstreamTimeout("the upstream timed out (504)", fields=fields)
    return UpstreamFailed(f"the upstream answered {method} {key!r} with {status}", fields=fields)


class ResourceLocks:
    """One asyncio lock per resource, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, resource: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(resource, (asyncio.Lock(), 0))
        self._locks[resource] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[resource]
            if users == 1:
                del self._locks[resource]
            else:
                self._locks[resource] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class _Answer:
    def __init__(self, status: int, body: bytes, headers: CIMultiDict[str]) -> None:
        self.status = status
        self.body = body
        self.headers = headers


def _no_idempotency(caller: Caller) -> None:
    # The upstream's outcome is not in our transaction, so a first outcome cannot be recorded with it.
    if caller.idempotency_key is not None:
        raise NotSupported(
            "Idempotency-Key is not available in proxy mode: the upstream's outcome is not committed with "
            "the mark; send the request without it"
        )


def _written_by(key: str, answer: _Answer, *, upstream: str) -> int | None:
    """The writer's token an upstream GET states, None if it states none; 502 unless it is one valid token."""
    stated = answer.headers.getall("Fencing-Token", [])
    if not stated:
        return None
    token = token_or_none(stated[0]) if len(stated) == 1 else None
    if token is None:
        shown = ", ".join(f"{value[:40]!r} ({len(value)} characters)" for value in stated[:3])
        raise UpstreamFailed(
            f"the upstream answered GET {key!r} with Fencing-Token {shown}: not one decimal integer in "
            f"1..{MAX_TOKEN}; the gateway passes on no token it would refuse from a client",
            fields={"upstream": upstream, "key": key},
        )
    return token


def _object_data(key: str, resource: str, answer: _Answer, *, upstream: str) -> ObjectData:
    """An upstream GET's answer as the gateway returns it (the writer's token from its header)."""
    meta = ObjectMeta(
        key=key,
        resource=resource,
        token=_written_by(key, answer, upstream=upstream),
        version=None,
        size=len(answer.body),
        digest=digest_of(answer.body),
    )
    content_type = answer.headers.get("Content-Type", "application/octet-stream")
    return ObjectData(meta=meta, data=answer.body, content_type=content_type)


class UpstreamStore(ObjectStore):
    """`ObjectStore` that fences in SQL and keeps the bytes in an upstream HTTP service.

    `fences` runs the fenced unit without objects (`Policy(objects=False)`); `exclusive`, if given,
    raises to refuse a fenced request (the one-replica claim lapsed) before anything is changed.
    """

    def __init__(
        self,
        *,
        fences: SqlObjectStore,
        session: aiohttp.ClientSession,
        base_url: str,
        timeout: float,
        exclusive: Callable[[], None] | None = None,
    ) -> None:
        assert not fences.policy.objects, "proxy mode keeps no objects in its own database"
        self._fences = fences
        self._exclusive = exclusive
        self._session = session
        self._base = base_url.rstrip("/")
        self._timeout = timeout
        self.locks = ResourceLocks()

    async def _forward(
        self,
        method: str,
        key: str,
        *,
        resource: str,
        token: int | None,
        data: bytes | None = None,
        content_type: str | None = None,
    ) -> _Answer:
        headers = {"Fencing-Resource": resource}
        if token is not None:
            headers["Fencing-Token"] = str(token)
        if content_type is not None:
            headers["Content-Type"] = content_type
        url = f"{self._base}/{quote(key, safe='/')}"
        fields = {"upstream": self._base, "key": key}
        try:
            async with asyncio.timeout(self._timeout):
                async with self._session.request(method, url, data=data, headers=headers) as resp:
                    answer = _Answer(resp.status, await resp.read(), resp.headers.copy())
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"no upstream answer to {method} {key!r} within {self._timeout}s; its outcome is unknown",
                fields=fields,
            ) from exc
        # An upstream that refuses the gateway's client certificate resets the connection only after
        # TLS 1.3's handshake: here a reset is answered 503, as any refused certificate is.
        except (aiohttp.ClientConnectionError, OSError) as exc:
            raise Unavailable(
                f"the upstream is unreachable ({exc}); the request was not applied, retry",
                code="upstream_unavailable",
                fields=fields,
            ) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamFailed(
                f"the upstream answered {method} {key!r} badly: {exc}", fields=fields
            ) from exc
        if 200 <= answer.status < 300:
            return answer
        if answer.status == 404 and method in ("GET", "DELETE"):
            raise ObjectNotFound(f"no object under key {key!r} upstream", key=key)
        raise failure(method, key, answer.status, where=self._base)

    async def fenced(self, request: FencedRequest) -> ObjectMeta | ObjectData:
        """The fence in SQL, then the request forwarded, both under the resource's lock."""
        key, resource, token = request.key, request.resource, request.token
        if request.method != "GET":
            _no_idempotency(request.caller)
        async with self.locks.hold(resource):
            if self._exclusive is not None:
                self._exclusive()  # this process alone orders the resource's writes, or none are sent
            await self._fences.fenced(request)
            if request.method == "PUT":
                answer = await self._forward(
                    "PUT", key, resource=resource, token=token, data=request.data,
                    content_type=request.content_type,
                )  # fmt: skip
                return ObjectMeta(
                    key=key, resource=resource, token=token, version=None, size=len(request.data),
                    digest=digest_of(request.data), created=answer.status == 201,
                )  # fmt: skip
            try:
                answer = await self._forward(request.method, key, resource=resource, token=token)
            except ObjectNotFound as exc:
                # the fence passed and its audit entry is committed: not a second, refusal-style entry
                exc.audited = True
                raise
        if request.method == "GET":
            return _object_data(key, resource, answer, upstream=self._base)
        return ObjectMeta(key=key, resource=resource, token=token, version=None, size=0, digest=None)

    async def read(self, key: str, *, resource: str) -> ObjectData:
        answer = await self._forward("GET", key, resource=resource, token=None)
        return _object_data(key, resource, answer, upstream=self._base)

    async def list(self, prefix: str, *, after: str, limit: int) -> list[ObjectMeta]:
        raise NotSupported("listing is not available in proxy mode: list on the upstream service itself")

    async def mark(self, resource: str) -> int:
        return await self._fences.mark(resource)

    async def marks_count(self) -> int:
        return await self._fences.marks_count()

    async def ping(self) -> None:
        await self._fences.ping()

    async def record_refusals(self, entries: Sequence[Refused]) -> None:
        await self._fences.record_refusals(entries)
