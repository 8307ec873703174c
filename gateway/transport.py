"""What the conditional store asks of an upstream's driver, and the names both sides write.

Kept apart from the algorithm (`gateway.conditional`) so a driver
(`gateway.s3`, `gateway.http_transport`) and the probe that checks one
(`gateway.probe`) depend only on this contract: four calls and a listing,
the `Version` they answer, the metadata every object written through the
gateway carries, and `VersionChanged` for a write the store refused.

A transport maps its driver's errors to the gateway's: 502 garbage, 503
unreachable, 504 no answer in time (outcome unknown, so the algorithm drops
its cached version of the key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.errors import UpstreamFailed
from gateway.fencing_token import token_or_none
from lockclient.wire import MAX_TOKEN
from storage.models import DEFAULT_CONTENT_TYPE

# The user metadata every object written through the gateway carries (x-amz-meta-* on S3).
TOKEN, RESOURCE, TOMBSTONE = "fencing-token", "fencing-resource", "fencing-tombstone"
REQUEST = "fencing-request"  # the id of the Idempotency-Key request that wrote the version
TOMBSTONE_PREFIX = b"fencegate tombstone "
TOMBSTONE_SIZE = len(TOMBSTONE_PREFIX) + 32  # the prefix and 16 random bytes in hex
SCRATCH_PREFIX = ".fencegate-probe/"  # the probe's scratch keys (gateway.probe), never listed


class VersionChanged(Exception):
    """The store refused a conditional write: the version it was conditional on is no longer there."""


@dataclass(frozen=True, slots=True)
class Version:
    """One version of a key at the store, as a HEAD or a write's answer tells it.

    `token` and `resource` are None for an object the gateway never wrote
    (no fencing metadata): any fenced write may replace it, conditionally.
    """

    etag: str
    token: int | None
    resource: str | None
    tombstone: bool
    size: int
    content_type: str = DEFAULT_CONTENT_TYPE
    request: str | None = None  # `REQUEST`: set by a write sent with an Idempotency-Key


@dataclass(frozen=True, slots=True)
class Listed:
    """One key of a listing page: what the store's listing says without reading the object."""

    key: str
    etag: str
    size: int


class Transport(Protocol):
    """What the algorithm needs from a store that does conditional writes; keys are the gateway's."""

    where: str  # the store as logs name it (s3://bucket/prefix/): never a credential
    # True if a write's metadata comes back on a read (the `REQUEST` id an Idempotency-Key retry looks for)
    keeps_metadata: bool

    async def head(self, key: str) -> Version | None:
        """The current version, None if the key holds nothing."""

    async def get(self, key: str) -> tuple[Version, bytes] | None:
        """The current version and its bytes, None if the key holds nothing."""

    async def put_if(
        self, key: str, data: bytes, *, content_type: str, metadata: Mapping[str, str], match: str | None
    ) -> str:
        """Write if the current ETag is `match` (None: only if the key holds nothing); the new ETag.
        VersionChanged if not."""

    async def delete_if(self, key: str, *, match: str) -> None:
        """Remove the key if its current ETag is `match` (the probe's check); VersionChanged if not."""

    async def list(self, prefix: str, *, after: str, limit: int) -> list[Listed]:
        """Up to `limit` keys under `prefix` after `after`, in order."""


def version_of(
    etag: str, metadata: Mapping[str, str], *, size: int, content_type: str, key: str, where: str
) -> Version:
    """A version from the store's ETag and metadata; 502 if the stored token is not one the gateway
    would accept from a client (it would otherwise pass it on, or compare against it)."""
    raw = metadata.get(TOKEN)
    token = None if raw is None else token_or_none(raw)
    if raw is not None and token is None:
        raise UpstreamFailed(
            f"the store holds {key!r} with {TOKEN} {raw[:40]!r}: not a decimal integer in 1..{MAX_TOKEN}",
            fields={"upstream": where, "key": key},
        )
    tombstone = metadata.get(TOMBSTONE) == "1"
    return Version(etag, token, metadata.get(RESOURCE), tombstone, size, content_type, metadata.get(REQUEST))
