"""What the gateway client's calls take and give: the fencing keywords, the objects' records, and
the `Send` its `on_send` hook sees.

Kept apart from `GatewayClient` so its blocking twin (`lockclient.sync_http`)
and `lockclient.sql` name the same types without the client's machinery.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypedDict

from lockclient.protocols import Fenced

__all__ = [
    "NO_HEADERS",
    "Fencing",
    "FetchedObject",
    "ObjectInfo",
    "OnSend",
    "Send",
    "WriteOptions",
    "check_fenced",
    "info_from",
]

NO_HEADERS: Mapping[str, str] = MappingProxyType({})


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """One request as it went on the wire, retries each their own: what `on_send` is handed.

    A history of these is what a caller checks against (the soak does): it
    shows every retry, and which of them got an answer. `status` is None when
    no answer came, and `failure` then says why: "timeout", "disconnected"
    (both: the outcome is unknown), "unreachable" or "tls" (nothing was sent).
    """

    method: str
    path: str  # percent-encoded, as sent, without the query
    gateway: str  # the base URL, without its password
    headers: Mapping[str, str]  # the request's, without `Authorization`
    started: float  # time.monotonic() before the request went out
    ended: float  # time.monotonic() once its answer was read or it failed
    status: int | None = None
    response_headers: Mapping[str, str] = field(default_factory=lambda: NO_HEADERS)
    response_body: bytes = b""
    failure: str | None = None


OnSend = Callable[[Send], object]  # called once per send; what it raises is logged, never the call's


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
