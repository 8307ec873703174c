"""What the gateway needs from a fenced store, and the records it gets back.

Every fenced method takes `resource` and `token`, checks and raises the
resource's mark in the same transaction as the change, and raises
`StaleToken` (having changed nothing) when the mark is higher, or
`ResourceMismatch` when the key belongs to another resource.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Literal

from storage.models import DEFAULT_CONTENT_TYPE


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What a client learns about an accepted request.

    `token` is the token that wrote the object; `version` counts its writes.
    Either is None when an upstream service holds the bytes and the gateway
    cannot know (proxy mode). `replayed` says the answer is an Idempotency-Key
    retry's first outcome, applied once before; it is how the answer came,
    not part of what it says, so it takes no part in equality.
    """

    key: str
    resource: str
    token: int | None
    version: int | None
    size: int
    digest: str | None
    created: bool = False
    replayed: bool = field(default=False, compare=False)
    etag: str | None = None  # the upstream store's entity tag of this version (proxy mode), quoted


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a fenced request, for the audit trail and the idempotency records.

    `client` is the API key's name (or the peer address on an open gateway).
    `idempotency_key` (PUT and DELETE only) makes a retry return the first
    accepted outcome instead of applying twice; `request_digest` is what the
    retry must match (method, key, resource, token, body, Content-Type), and
    `legacy_digest` the same without the Content-Type, which is what records
    written by earlier versions hold.
    """

    client: str
    idempotency_key: str | None = None
    request_digest: str = ""
    legacy_digest: str = ""


ANONYMOUS = Caller(client="-")


@dataclass(frozen=True, slots=True)
class ObjectData:
    """An object's bytes and what is known about them."""

    meta: ObjectMeta
    data: bytes
    content_type: str = DEFAULT_CONTENT_TYPE


@dataclass(frozen=True, slots=True)
class Refused:
    """A refused request as the audit trail records it (it changed nothing)."""

    at: datetime
    client: str
    method: str
    key: str | None
    resource: str | None
    token: int | None
    mark: int | None
    status: int
    outcome: str


Method = Literal["PUT", "GET", "DELETE"]


@dataclass(frozen=True, slots=True)
class FencedRequest:
    """One fenced request: `token` checked against `resource`'s mark, `key` bound to `resource`."""

    method: Method
    key: str
    resource: str
    token: int
    data: bytes = b""
    content_type: str = DEFAULT_CONTENT_TYPE
    caller: Caller = ANONYMOUS
    precondition: Precondition | None = None


@dataclass(frozen=True, slots=True)
class Precondition:
    """The client's own condition on a write (`If-Match` / `If-None-Match: *`), checked after the fence.

    `if_match` is one strong entity tag as sent (quoted) or `*` (the key holds an object, not a
    tombstone); `if_none_match` asks that the key hold nothing (a tombstone counts as nothing).
    A store that cannot check one in the same step as its write does not accept it.
    """

    if_match: str | None = None
    if_none_match: bool = False


class FencedOps(ABC):
    """`put`, fenced `get` and `delete`, written once over `fenced(request)`; plain `get` is `read`."""

    @abstractmethod
    async def fenced(self, request: FencedRequest) -> ObjectMeta | ObjectData:
        """Decide and apply one fenced request: `ObjectData` for a GET, `ObjectMeta` otherwise."""

    @abstractmethod
    async def read(self, key: str, *, resource: str) -> ObjectData:
        """The object under `key`, no fence (`resource` is what the request named)."""

    async def put(
        self,
        key: str,
        data: bytes,
        *,
        resource: str,
        token: int,
        caller: Caller = ANONYMOUS,
        content_type: str = DEFAULT_CONTENT_TYPE,
        precondition: Precondition | None = None,
    ) -> ObjectMeta:
        request = FencedRequest("PUT", key, resource, token, data, content_type, caller, precondition)
        meta = await self.fenced(request)
        assert isinstance(meta, ObjectMeta)
        return meta

    async def get(
        self, key: str, *, resource: str, token: int | None, caller: Caller = ANONYMOUS
    ) -> ObjectData:
        if token is None:
            return await self.read(key, resource=resource)
        found = await self.fenced(FencedRequest("GET", key, resource, token, caller=caller))
        assert isinstance(found, ObjectData)
        return found

    async def delete(
        self,
        key: str,
        *,
        resource: str,
        token: int,
        caller: Caller = ANONYMOUS,
        precondition: Precondition | None = None,
    ) -> ObjectMeta:
        request = FencedRequest("DELETE", key, resource, token, caller=caller, precondition=precondition)
        meta = await self.fenced(request)
        assert isinstance(meta, ObjectMeta)
        return meta


class ObjectStore(FencedOps):
    """A key-value store behind a fence; `preconditions` if it honours a request's `Precondition`."""

    preconditions: ClassVar[bool] = False

    @abstractmethod
    async def list(self, prefix: str, *, after: str, limit: int) -> list[ObjectMeta]: ...

    @abstractmethod
    async def mark(self, resource: str) -> int:
        """The resource's high-water mark; 0 if no token was ever accepted."""

    @abstractmethod
    async def marks_count(self) -> int: ...

    @abstractmethod
    async def ping(self) -> None: ...

    @abstractmethod
    async def record_refusals(self, entries: Sequence[Refused]) -> None:
        """Append refused requests to the audit trail, in one transaction."""
