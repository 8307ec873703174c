"""The fence held at the upstream store by the store's own compare-and-swap.

The gateway's SQL fence (the key's binding, the raised mark, the audit
entry, the future guard) still runs first, as in every mode; it is not
enough on its own, because a request the gateway accepted can be delayed on
its way to the store, sent by another replica, or time out here and land
later. So the store decides last. The object carries its token and resource
as metadata (`TOKEN`, `RESOURCE`), and every write the gateway sends is
conditional on the version whose token it compared: `If-Match` on that
version's ETag, `If-None-Match: *` when the key held nothing. A write that
was overtaken fails its precondition at the store, wherever it was held.

One write, decided here for every transport:

1. The version the decision is about: the one this gateway last wrote or
   saw for the key (cached, so the common case costs no extra round trip),
   else a HEAD.
2. Decide: a stored token above the request's is 409 `stale_token` (nothing
   written); an object bound to another resource is 409 `resource_mismatch`.
3. Send the write conditional on that version. On 412 the cache was stale or
   someone wrote in between: re-read (HEAD) and decide again, at most
   `attempts` sends; then 503 `upstream_contended` (nothing this request sent
   was applied: each send failed its precondition).

A client that read the object may pass its own precondition (`If-Match` on
the ETag its read answered, `*`, or `If-None-Match: *`; gateway.parsing):
after step 2 it must hold for the version, or the answer is 412
`precondition_failed` with nothing sent (a version from the cache is read
again first). The send is then on the client's ETag, and after a store 412
the new read is decided again: 409 above the token, else 412, never a send
on a newer version, which the client did not read. Without it a write the
gateway accepted before the client's fenced read, landing between that read
and the client's write, would be written over (docs/safety.md).

A delete writes a tombstone instead of removing the key: a small object
with `TOMBSTONE` set, the deleting token and resource, and a body unique to
it. Removing the key would let a held `If-None-Match: *` write from an older
token recreate it; the tombstone is a version like any other, so that write
and every `If-Match` on an older ETag fail at the store. GET of a tombstone
is 404; a write over it is a create (201). The body is unique because the
store's ETag is the MD5 of the body: two tombstones with one body would
have one ETag, and a write held since the first would match the second.

That ETag rule has a cost this module cannot remove (docs/safety.md): the
compare-and-swap compares bytes, not versions, so a write held since a
version whose bytes a later, higher-token write puts back exactly can still
match. Writes of distinct bytes, and every delete, are ordered by the store.

A write sent with an `Idempotency-Key` is recorded in the gateway's
database around the store's write, and carries the request's id as metadata
(`REQUEST`), so a retry can tell at the store whether the first attempt
landed (`gateway.proxyidem`). A re-read after a 412 that finds the
request's own id means a twin of this request got there first: its success.

A transport (`gateway.transport`, which also holds the metadata names; S3
in `gateway.s3`, http(s) in `gateway.http_transport`) is four calls and a
listing; it maps its driver's errors to the gateway's (502 garbage, 503
unreachable, 504 no answer in time: outcome unknown, so the cache entry is
dropped).
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections import OrderedDict
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.errors import NotSupported, PreconditionNotMet, Unavailable, UpstreamFailed, UpstreamTimeout
from gateway.proxyidem import ProxyRecords, request_id
from gateway.transport import (
    REQUEST,
    RESOURCE,
    SCRATCH_PREFIX,
    TOKEN,
    TOMBSTONE,
    TOMBSTONE_PREFIX,
    Listed,
    Transport,
    Version,
    VersionChanged,
)
from gateway.upstream import ResourceLocks
from storage.errors import BelowMark, BoundElsewhere, ObjectNotFound
from storage.fenced import digest_of
from storage.protocols import FencedRequest, ObjectData, ObjectMeta, ObjectStore, Refused
from storage.sql import SqlObjectStore

MAX_ATTEMPTS = 4  # conditional sends per request before 503 upstream_contended
CLAIM_WINDOW = 30.0  # seconds a retry waits for its claimant's answer before deciding at the store
CACHE_SIZE = 10_000  # keys whose last known version is kept (least recently used goes first)
ROUND_TRIP_BUCKETS = (1, 2, 3, 4, 6, 8, 12)
LIST_HEADS = 16  # HEADs a listing sends at once for keys whose version is not cached


class ProxyMetrics:
    """Round trips to the store per accepted write, and the preconditions that failed."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.round_trips = Histogram(
            "fencegate_upstream_round_trips",
            "requests to the store per accepted write (1: the cached version was current)",
            buckets=ROUND_TRIP_BUCKETS,
            registry=registry,
        )
        self.precondition_failures = Counter(
            "fencegate_upstream_precondition_failures",
            "conditional writes the store refused 412 (a stale cache, or a write in between)",
            registry=registry,
        )


class ConditionalStore(ObjectStore):
    """`ObjectStore` fenced in SQL first, then at the store by conditional writes (module docstring)."""

    preconditions = True  # a client's If-Match is the store's own, checked in its compare-and-swap

    def __init__(
        self,
        *,
        fences: SqlObjectStore,
        transport: Transport,
        metrics: ProxyMetrics,
        attempts: int = MAX_ATTEMPTS,
        cache_size: int = CACHE_SIZE,
        claim_window: float = CLAIM_WINDOW,
    ) -> None:
        assert not fences.policy.objects, "proxy mode keeps no objects in its own database"
        self._fences = fences
        self.transport = transport
        self._metrics = metrics
        self._attempts = attempts
        self._cache_size = cache_size
        self._cache: OrderedDict[str, Version] = OrderedDict()
        self.locks = ResourceLocks()  # per key: this replica's own writes to a key never race each other
        self.records = ProxyRecords(fences.engine, window=claim_window, audit=fences.record_refusals)

    async def fenced(self, request: FencedRequest) -> ObjectMeta | ObjectData:
        recorded = request.method != "GET" and request.caller.idempotency_key is not None
        if recorded and not self.transport.keeps_metadata:
            raise NotSupported(
                "Idempotency-Key is not available with this upstream: it keeps no metadata, so a retry "
                "could not tell whether its first attempt landed; send the request without it"
            )
        async with self.locks.hold(request.key):
            # binding, mark, audit, the idempotency record's claim: BelowMark raised here first
            first = await self._fences.fenced(request)
            if request.method == "GET":
                return await self._fenced_read(request)
            if not recorded:
                return await self._write(request)
            assert isinstance(first, ObjectMeta)
            if not first.replayed:
                return await self.records.record(request, lambda: self._write(request))
        return await self.records.replayed(
            request, first, afresh=lambda: self._meta(request), settle=lambda: self._settle(request)
        )

    async def _meta(self, request: FencedRequest) -> ObjectMeta:
        found = await self.fenced(request)
        assert isinstance(found, ObjectMeta)
        return found

    async def _settle(self, request: FencedRequest) -> ObjectMeta:
        """A retry's write when its claimant got no answer: decided on a fresh read of the store."""
        async with self.locks.hold(request.key):
            self._cache.pop(request.key, None)
            return await self._write(request, settling=True)

    async def _write(self, request: FencedRequest, *, settling: bool = False) -> ObjectMeta:
        key, deleting = request.key, request.method == "DELETE"
        rid = None if request.caller.idempotency_key is None else request_id(request.caller)
        current, trips = self._cache.get(key), 0
        if current is None or not _holds(request, current):
            current, trips = await self._head(key), 1  # a cached version never refuses a precondition
        for _ in range(self._attempts):
            if rid is not None and current is not None and current.request == rid:
                # a twin of this request (or its first attempt) wrote it
                return dataclasses.replace(_landed(request, etag=current.etag), replayed=True)
            _decide(request, current)
            if not _holds(request, current):
                raise PreconditionNotMet(
                    f"the key {key!r}'s current version at the store is not the one this write is "
                    "conditional on (If-Match / If-None-Match); nothing was written: read it again",
                    fields={"key": key},
                )
            if settling and current is not None and current.token == request.token:
                raise Unavailable(
                    f"the store holds another write of token {request.token} under {key!r}, and no trace "
                    "of this request's first attempt: it may have landed before that write; not sent again",
                    code="upstream_outcome_unknown",
                    fields={"key": key},
                )
            if deleting and (current is None or current.tombstone):
                raise ObjectNotFound(f"no object under key {request.key!r} upstream", key=key, audited=True)
            data, content_type = (_tombstone_body(), "application/octet-stream") if deleting else (
                request.data, request.content_type
            )  # fmt: skip
            metadata = {TOKEN: str(request.token), RESOURCE: request.resource}
            if rid is not None:
                metadata[REQUEST] = rid
            if deleting:
                metadata[TOMBSTONE] = "1"
            trips += 1
            try:
                etag = await self.transport.put_if(
                    key, data, content_type=content_type, metadata=metadata,
                    match=None if current is None else current.etag,
                )  # fmt: skip
            except VersionChanged:
                self._metrics.precondition_failures.inc()
                self._cache.pop(key, None)
                current, trips = await self._head(key), trips + 1
                continue
            except (UpstreamTimeout, Unavailable, UpstreamFailed):
                self._cache.pop(key, None)  # the outcome may be unknown: read the store next time
                raise
            self._remember(
                key, Version(etag, request.token, request.resource, deleting, len(data), content_type, rid)
            )
            self._metrics.round_trips.observe(trips)
            created = current is None or current.tombstone
            return _landed(request, created=created, etag=None if deleting else etag)
        raise Unavailable(
            f"the store's object {key!r} changed under each of {self._attempts} conditional writes; this "
            "request was not applied",
            code="upstream_contended",
            fields={"key": key},
        )

    async def _head(self, key: str) -> Version | None:
        found = await self.transport.head(key)
        if found is not None:
            self._remember(key, found)
        return found

    def _remember(self, key: str, version: Version) -> None:
        self._cache[key] = version
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    async def _fenced_read(self, request: FencedRequest) -> ObjectData:
        """The mark is raised (above); the bytes and the token are the store's. An object the store
        holds under another resource is refused, as a write to it would be (invariant 6)."""
        found = await self._get(request.key, resource=request.resource, audited=True)
        bound = found.meta.resource
        if bound != request.resource:
            raise BoundElsewhere(
                f"key {request.key!r} belongs to resource {bound!r} at the store",
                key=request.key, resource=request.resource, bound=bound,
            )  # fmt: skip
        return found

    async def read(self, key: str, *, resource: str) -> ObjectData:
        return await self._get(key, resource=resource, audited=False)

    async def _get(self, key: str, *, resource: str, audited: bool) -> ObjectData:
        found = await self.transport.get(key)
        if found is None or found[0].tombstone:
            raise ObjectNotFound(f"no object under key {key!r} upstream", key=key, audited=audited)
        version, data = found
        self._remember(key, version)
        meta = ObjectMeta(
            key=key, resource=version.resource or resource, token=version.token, version=None,
            size=len(data), digest=digest_of(data), etag=version.etag,
        )  # fmt: skip
        return ObjectData(meta=meta, data=data, content_type=version.content_type)

    async def list(self, prefix: str, *, after: str, limit: int) -> list[ObjectMeta]:
        """Keys under `prefix` after `after`, tombstones and the probe's scratch keys skipped.

        A listing does not show metadata, so each key's token and resource (and whether it is a
        tombstone) come from the cached version when the listed ETag is that version's, else from
        a HEAD (at most `LIST_HEADS` at once). Store pages are read until `limit` objects are found
        or the store has no more.
        """
        found: list[ObjectMeta] = []
        cursor = after
        while len(found) < limit:
            page = await self.transport.list(prefix, after=cursor, limit=limit)
            if not page:
                break
            cursor = page[-1].key
            versions = await self._versions(
                [item for item in page if not item.key.startswith(SCRATCH_PREFIX)]
            )
            for item, version in versions:
                if version is not None and not version.tombstone and len(found) < limit:
                    found.append(ObjectMeta(
                        key=item.key, resource=version.resource or item.key, token=version.token,
                        version=None, size=version.size, digest=None,
                    ))  # fmt: skip
            if len(page) < limit:
                break
        return found

    async def _versions(self, items: Sequence[Listed]) -> Sequence[tuple[Listed, Version | None]]:
        heads = asyncio.Semaphore(LIST_HEADS)

        async def version(item: Listed) -> Version | None:
            cached = self._cache.get(item.key)
            if cached is not None and cached.etag == item.etag:
                return cached
            async with heads:
                return await self._head(item.key)

        return tuple(zip(items, await asyncio.gather(*(version(item) for item in items)), strict=True))

    async def mark(self, resource: str) -> int:
        return await self._fences.mark(resource)

    async def marks_count(self) -> int:
        return await self._fences.marks_count()

    async def ping(self) -> None:
        """Ready only if both answer: the gateway's database, and the store (a HEAD of a scratch key:
        unreachable is 503, credentials it refuses 502)."""
        await self._fences.ping()
        await self.transport.head(SCRATCH_PREFIX + "ready")

    async def record_refusals(self, entries: Sequence[Refused]) -> None:
        await self._fences.record_refusals(entries)


def _decide(request: FencedRequest, current: Version | None) -> None:
    """Refuse a request the stored version outranks; return if it may be written over `current`."""
    if current is None:
        return
    if current.resource is not None and current.resource != request.resource:
        raise BoundElsewhere(
            f"key {request.key!r} belongs to resource {current.resource!r} at the store",
            key=request.key, resource=request.resource, bound=current.resource,
        )  # fmt: skip
    if current.token is not None and current.token > request.token:
        raise BelowMark(
            f"token {request.token} is below the token {current.token} the store holds for {request.key!r}",
            resource=request.resource, token=request.token, highest=current.token,
        )  # fmt: skip


def _holds(request: FencedRequest, current: Version | None) -> bool:
    """Whether the client's precondition (if any) holds for `current`; a tombstone is no object.
    Strong comparison: an If-Match holds only for the very tag the store gives the version."""
    condition = request.precondition
    if condition is None:
        return True
    if current is None or current.tombstone:
        return condition.if_none_match
    return condition.if_match == "*" or current.etag == condition.if_match


def _tombstone_body() -> bytes:
    """A body no other tombstone has, so no two tombstones share an ETag (the MD5 of the body)."""
    return TOMBSTONE_PREFIX + secrets.token_hex(16).encode()


def _landed(request: FencedRequest, *, created: bool = False, etag: str | None = None) -> ObjectMeta:
    """The answer to a write the store holds, with the store's ETag of it: a delete's carries no bytes."""
    if request.method == "DELETE":
        return ObjectMeta(key=request.key, resource=request.resource, token=request.token, version=None,
                          size=0, digest=None)  # fmt: skip
    return ObjectMeta(
        key=request.key, resource=request.resource, token=request.token, version=None,
        size=len(request.data), digest=digest_of(request.data), created=created, etag=etag,
    )  # fmt: skip
