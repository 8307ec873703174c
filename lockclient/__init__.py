"""lockclient: Redlock leases that carry fencing tokens.

    async with Redlock(masters, tokens=SQLiteTokens("tokens.db")) as locker:
        async with locker.lock("invoices", ttl=10.0) as lease:
            lease.token, lease.remaining()

A lease is advisory: two holders can overlap after a pause or a clock jump.
What keeps storage safe is the token, checked by the fence (the gateway).
`lockclient.sync` offers the same for code without an event loop.
"""

from typing import TYPE_CHECKING

from lockclient.config import DEFAULT_RETRY, RedlockSettings, RetryPolicy, TLSSettings
from lockclient.errors import (
    BadRequest,
    BodyTimeout,
    ConfigurationError,
    ExtensionLimitReached,
    Forbidden,
    GatewayError,
    IdempotencyKeyReused,
    LockClientError,
    LockLost,
    LockNotAcquired,
    MissingExtra,
    NotFound,
    OutcomeUnknown,
    PreconditionFailed,
    QuorumUnavailable,
    ResourceMismatch,
    StaleToken,
    TLSError,
    TokenFromTheFuture,
    TokenSourceError,
    TooManyRequests,
    Unauthorized,
)
from lockclient.gateway_retry import DEFAULT_GATEWAY_RETRY, GatewayRetry
from lockclient.gateway_types import FetchedObject, ObjectInfo, Send
from lockclient.http import GatewayClient
from lockclient.lease import Lease, token_of
from lockclient.multi import MultiLease
from lockclient.observe import Observer
from lockclient.options import AcquireOptions
from lockclient.protocols import Clock, Fenced, TokenSource
from lockclient.redlock import Redlock
from lockclient.state import ForcedUnlock, LockState, MasterLock
from lockclient.tokens import SOURCES, open_token_source

if TYPE_CHECKING:
    from lockclient.tokens import EtcdTokens, PostgresTokens, RedisIncrTokens, SQLiteTokens, ZooKeeperTokens

__all__ = [
    "DEFAULT_GATEWAY_RETRY",
    "DEFAULT_RETRY",
    "AcquireOptions",
    "BadRequest",
    "BodyTimeout",
    "Clock",
    "ConfigurationError",
    "EtcdTokens",
    "ExtensionLimitReached",
    "Fenced",
    "FetchedObject",
    "Forbidden",
    "ForcedUnlock",
    "GatewayClient",
    "GatewayError",
    "GatewayRetry",
    "IdempotencyKeyReused",
    "Lease",
    "LockClientError",
    "LockLost",
    "LockNotAcquired",
    "LockState",
    "MasterLock",
    "MissingExtra",
    "MultiLease",
    "NotFound",
    "ObjectInfo",
    "Observer",
    "OutcomeUnknown",
    "PostgresTokens",
    "PreconditionFailed",
    "QuorumUnavailable",
    "RedisIncrTokens",
    "Redlock",
    "RedlockSettings",
    "ResourceMismatch",
    "RetryPolicy",
    "SQLiteTokens",
    "Send",
    "StaleToken",
    "TLSError",
    "TLSSettings",
    "TokenFromTheFuture",
    "TokenSource",
    "TokenSourceError",
    "TooManyRequests",
    "Unauthorized",
    "ZooKeeperTokens",
    "open_token_source",
    "token_of",
]


def __getattr__(name: str) -> type:
    """Token sources load on first use, with their drivers (kazoo, SQLAlchemy and asyncpg, aetcd)."""
    if name in SOURCES:
        from lockclient import tokens

        source: type = getattr(tokens, name)
        return source
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
