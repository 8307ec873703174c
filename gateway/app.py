"""`create_app(settings)`: the one place the gateway's parts are connected, the URL table included."""

from __future__ import annotations

from aiohttp import web

from gateway import views
from gateway.admission import ClientLimiter, Drain
from gateway.app_keys import AppKeys
from gateway.clients import client_middleware
from gateway.config import Settings
from gateway.contexts import audit_ctx, auth_ctx, fencer_ctx, ordering_ctx, storage_ctx
from gateway.metrics import Metrics
from gateway.middlewares import deadline_middleware, error_middleware
from gateway.readiness import Readiness
from gateway.retention import retention_ctx
from lockclient.protocols import TokenSource
from storage.fenced import FENCED, Policy

# Requests are small values plus headers; aiohttp's own 1 MiB default would
# answer 413 before our limit, so the body limit is passed through here.
HEADER_LIMIT = 8190  # bytes per header line (aiohttp's default); Fencing-* values are short
MAX_HEADERS = 64  # header lines per request; a client needs a handful
# Any characters, line breaks included, so a malformed name reaches the view and is 400 with the
# reason, not 404 "no route".
ANY = r"[\s\S]+"
KEY = f"{{key:{ANY}}}"


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


def setup_routes(app: web.Application) -> None:
    """The URL table, in one place (the OpenAPI document is checked against it by a test)."""
    app.router.add_put(f"/v1/objects/{KEY}", views.put_object, name="put_object")
    # HEAD is GET without the body (RFC 9110): with a Fencing-Token it is a fenced read too.
    app.router.add_get(f"/v1/objects/{KEY}", views.get_object, name="get_object")
    app.router.add_delete(f"/v1/objects/{KEY}", views.delete_object, name="delete_object")
    app.router.add_get("/v1/objects", views.list_objects, name="list_objects", allow_head=False)
    app.router.add_get(f"/v1/fences/{{resource:{ANY}}}", views.get_fence, name="get_fence", allow_head=False)
    app.router.add_get("/healthz", views.healthz, name="healthz", allow_head=False)
    app.router.add_get("/readyz", views.readyz, name="readyz", allow_head=False)
    app.router.add_get("/metrics", views.metrics, name="metrics", allow_head=False)
    app.router.add_get("/v1/openapi.json", views.openapi, name="openapi", allow_head=False)
