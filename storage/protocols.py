"""What the gateway needs from a fenced store, and the records it gets back.

Every fenced method takes `resource` and `token`, checks and raises the
resource's mark in the same transaction as the change, and raises
`StaleTokenError` (having changed nothing) when the mark is higher.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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
class ObjectData:
    """An object's bytes and what is known about them."""

    meta: ObjectMeta
    data: bytes
    content_type: str = "application/octet-stream"


class ObjectStore(Protocol):
    """A key-value store behind a fence."""

    async def put(self, key: str, data: bytes, *, resource: str, token: int) -> ObjectMeta: ...

    async def get(self, key: str, *, resource: str, token: int | None) -> ObjectData: ...

    async def delete(self, key: str, *, resource: str, token: int) -> ObjectMeta: ...

    async def list(self, prefix: str, *, after: str, limit: int) -> list[ObjectMeta]: ...

    async def mark(self, resource: str) -> int:
        """The resource's high-water mark; 0 if no token was ever accepted."""
        ...

    async def marks_count(self) -> int: ...

    async def ping(self) -> None: ...
