"""The s3:// upstream's wiring: the transport opened, its conditional writes probed, the store made.

Kept apart from `gateway.contexts` so a gateway without an s3 upstream never
imports aiobotocore. Everything that can be wrong with the store at start
(no credentials, a bucket they cannot reach, a store that does not do
conditional writes as the probe checks them) is a `ConfigurationError`: one
line and exit 2, before the gateway listens.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from gateway.conditional import MAX_ATTEMPTS, ConditionalStore, ProxyMetrics
from gateway.config import Settings
from gateway.metrics import Metrics
from gateway.probe import check_upstream
from gateway.s3 import open_s3
from gateway.s3url import parse_s3_url
from storage.sql import SqlObjectStore

log = logging.getLogger("gateway")


@contextlib.asynccontextmanager
async def s3_store(
    settings: Settings, fences: SqlObjectStore, metrics: Metrics, *, conditional: bool = True
) -> AsyncIterator[ConditionalStore]:
    """The conditional store over `settings.upstream`; its client closes on exit."""
    assert settings.upstream is not None
    location = parse_s3_url(settings.upstream)
    async with open_s3(
        location, endpoint=settings.upstream_endpoint, call_timeout=settings.upstream_timeout,
        conditional=conditional,
    ) as transport:  # fmt: skip
        where = settings.upstream_endpoint or "AWS"
        log.info(
            "upstream %s at %s: every write conditional on the version checked (If-Match / "
            "If-None-Match: *), deletes leave tombstones",
            location,
            where,
        )
        if conditional:
            checks = await check_upstream(transport)
            log.info(
                "upstream %s passed the conditional-write probe: %s",
                location,
                ", ".join(c.name for c in checks),
            )
        else:
            log.warning(
                "THE STORE'S PRECONDITIONS ARE OFF (a test's control, not probed): stale writes can land"
            )
        transport.send_bodies_at_once()
        # a retry waits this long for its claimant, whose sends each end within the timeout
        window = settings.upstream_timeout * (2 * MAX_ATTEMPTS + 1) + 1.0
        yield ConditionalStore(
            fences=fences, transport=transport, metrics=ProxyMetrics(metrics.registry), claim_window=window
        )
