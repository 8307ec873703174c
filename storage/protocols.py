"""What the gateway needs from a fenced store, and the records it gets back.

Every fenced method takes `resource` and `token`, checks and raises the
resource's mark in the same transaction as the change, and raises
`StaleTokenError` (having changed nothing) when the mark is higher, or
`ResourceMismatch` when the key belongs to another resource.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from storage.models import DEFAULT_CONTENT_TYPE


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What a client learns about an accepted request.

    `token` is the token that wrote the object; `version` counts its writes.
    Either is None when an upstream service holds the bytes and the gateway
    cannot know (proxy mode).
    """

    key: str
    resource: str
    token: int | None
    version: int | None
    size: int
    digest: str | None
    created: bool = False


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a fenced request, for the audit trail and the idempotency records.

    `client` is the API key's name (or the peer address on an open gateway).
    `idempotency_key` (PUT and DELETE only) makes a retry return the first
    accepted outcome instead of applying twice; `request_digest` is what the
    retry must match (method, key, resource, token, body).
    """

    client: str
    idempotency_key: str | None = None
    request_digest: str = ""


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


class ObjectStore(Protocol):
    """A key-value store behind a fence."""

    async def put(
        self,
        key: str,
        data: bytes,
        *,
        resource: str,
        token: int,
        caller: Caller = ANONYMOUS,
        content_type: str = DEFAULT_CONTENT_TYPE,
    ) -> ObjectMeta: ...

    async def get(
        self, key: str, *, resource: str, token: int | None, caller: Caller = ANONYMOUS
    ) -> ObjectData: ...

    async def delete(
        self, key: str, *, resource: str, token: int, caller: Caller = ANONYMOUS
    ) -> ObjectMeta: ...

    async def list(self, prefix: str, *, after: str, limit: int) -> list[ObjectMeta]: ...

    async def mark(self, resource: str) -> int:
        """The resource's high-water mark; 0 if no token was ever accepted."""
        ...

    async def marks_count(self) -> int: ...

    async def ping(self) -> None: ...

    async def record_refusals(self, entries: Sequence[Refused]) -> None:
        """Append refused requests to the audit trail, in one transaction."""
        ...
