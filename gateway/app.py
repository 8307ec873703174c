"""`create_app(settings)`: the one place the gateway's parts are connected."""

from __future__ import annotations

from aiohttp import web

from gateway.admission import ClientLimiter, Drain
from gateway.app_keys import AppKeys
from gateway.clients import client_middleware
from gateway.config import Settings
from gateway.contexts import audit_ctx, auth_ctx, fencer_ctx, ordering_ctx, storage_ctx
from gateway.metrics import Metrics
from gateway.middlewares import deadline_middleware, error_middleware
from gateway.readiness import Readiness
from gateway.retention import retention_ctx
from gateway.routes import setup_routes
from lockclient.protocols import TokenSource
from storage.fenced import FENCED, Policy

# Requests are small values plus headers; aiohttp's own 1 MiB default would
# answer 413 before our limit, so the body limit is passed through here.
HEADER_LIMIT = 8190  # bytes per header line (aiohttp's default); Fencing-* values are short
MAX_HEADERS = 64  # header lines per request; a client needs a handful


def create_app(
    settings: Settings, *, tokens: TokenSource | None = None, policy: Policy = FENCED
) -> web.Application:
    """The gateway app. `tokens` enables the token-from-the-future guard; the app closes it.

    `policy` is the fenced unit's (`storage.fenced.Policy`); only the benchmark's fence-off
    yardstick passes another one, and no flag or environment variable reaches it.
    """
    app = web.Application(
        middlewares=[error_middleware, client_middleware, deadline_middleware],
        client_max_size=max(settings.max_body, 1),
        # keepalive_timeout also runs from the first byte of a connection (aiohttp >= 3.10): a
        # connection that sends no complete request within it is closed, slow headers included.
        handler_args={
            "max_line_size": HEADER_LIMIT,
            "max_field_size": HEADER_LIMIT,
            "max_headers": MAX_HEADERS,
            "keepalive_timeout": settings.idle_timeout,
        },
    )
    app[AppKeys.settings] = settings
    app[AppKeys.policy] = policy
    app[AppKeys.metrics] = Metrics()
    app[AppKeys.tokens] = tokens
    app[AppKeys.limiter] = ClientLimiter(limit=settings.max_client_requests)
    app[AppKeys.drain] = Drain()
    app[AppKeys.readiness] = Readiness()
    app.cleanup_ctx.append(ordering_ctx)  # first: a refused second replica is the only line
    app.cleanup_ctx.append(auth_ctx)
    app.cleanup_ctx.append(storage_ctx)
    app.cleanup_ctx.append(audit_ctx)
    app.cleanup_ctx.append(retention_ctx)
    app.cleanup_ctx.append(fencer_ctx)
    setup_routes(app)
    return app
