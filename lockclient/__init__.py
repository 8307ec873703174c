"""lockclient: Redlock leases that carry fencing tokens.

    async with Redlock(masters, tokens=SQLiteTokens("tokens.db")) as locker:
        async with locker.lock("invoices", ttl=10.0) as lease:
            lease.token, lease.remaining()

A lease is advisory: two holders can overlap after a pause or a clock jump.
What keeps storage safe is the token, checked by the fence (the gateway).
`lockclient.sync` offers the same for code without an event loop.
"""

from lockclient.config import DEFAULT_RETRY, RedlockSettings, RetryPolicy
from lockclient.errors import (
    ConfigurationError,
    ExtensionLimitReached,
    GatewayError,
    LockClientError,
    LockLost,
    LockNotAcquired,
    StaleToken,
    TokenSourceError,
)
from lockclient.http import FetchedObject, GatewayClient, ObjectInfo
from lockclient.lease import Lease, token_of
from lockclient.protocols import Clock, Fenced, TokenSource
from lockclient.redlock import Redlock
from lockclient.tokens import (
    PostgresTokens,
    RedisIncrTokens,
    SQLiteTokens,
    ZooKeeperTokens,
    open_token_source,
)

__all__ = [
    "DEFAULT_RETRY",
    "Clock",
    "ConfigurationError",
    "ExtensionLimitReached",
    "Fenced",
    "FetchedObject",
    "GatewayClient",
    "GatewayError",
    "Lease",
    "LockClientError",
    "LockLost",
    "LockNotAcquired",
    "ObjectInfo",
    "PostgresTokens",
    "RedisIncrTokens",
    "Redlock",
    "RedlockSettings",
    "RetryPolicy",
    "SQLiteTokens",
    "StaleToken",
    "TokenSource",
    "TokenSourceError",
    "ZooKeeperTokens",
    "open_token_source",
    "token_of",
]
