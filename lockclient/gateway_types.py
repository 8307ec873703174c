"""What the gateway client's calls take and give: the fencing keywords and the objects' records.

Kept apart from `GatewayClient` so its blocking twin (`lockclient.sync_http`)
and `lockclient.sql` name the same types without the client's machinery.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from lockclient.protocols import Fenced

__all__ = ["Fencing", "FetchedObject", "ObjectInfo", "WriteOptions", "check_fenced", "info_from"]


class Fencing(TypedDict, total=False):
    """What fences a call: `lease=` (a `Fenced`), or `token=` with `resource=`; each may be left out."""

    lease: Fenced | None
    token: int | None
    resource: str | None


class WriteOptions(Fencing, total=False):
    """The keywords of `put` and `delete`, async and blocking: the fencing and the `Idempotency-Key`."""

    idempotency_key: str | None
    if_match: str | None  # `If-Match`: the ETag a read answered (or "*"); 412 `PreconditionFailed` if not


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What the gateway reports about an accepted write, or a listed object."""

    key: str
    resource: str
    token: int | None
    version: int | None
    size: int
    etag: str | None = None
    created: bool = False


@dataclass(frozen=True, slots=True)
class FetchedObject:
    """An object read through the gateway: its bytes and the token that wrote them."""

    key: str
    data: bytes
    token: int | None
    version: int | None
    etag: str | None


def info_from(body: Mapping[str, Any], *, etag: str | None = None, created: bool = False) -> ObjectInfo:
    return ObjectInfo(
        key=body["key"],
        resource=body["resource"],
        token=body["token"],
        version=body["version"],
        size=body["size"],
        etag=etag,
        created=created,
    )


def check_fenced(lease: Fenced) -> None:
    """A lease that can tell it is lost (a `Lease`) raises `LockLost`."""
    check = getattr(lease, "check", None)
    if callable(check):
        check()
