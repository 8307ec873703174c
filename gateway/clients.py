"""Admission: who a request comes from, and holding its slots while it runs.

A client is its API key's name when keys are configured and the request
presents a valid one (or, with mutual TLS and no bearer key, its client
certificate names one), otherwise its certificate's name (`cert:<CN>`) or
its peer address. The identity is computed
once per request by `client_middleware` (the views reuse the key it found),
names the client in the audit trail and in idempotency records, and is what
the per-client cap (`admission.ClientLimiter`) counts. Probes (`/healthz`,
`/readyz`, `/metrics`) are not counted: a load balancer behind one address
must always be able to ask. Every other request also counts toward
`admission.Drain`, which graceful shutdown waits on.
"""

from __future__ import annotations

import contextlib

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.auth import ApiKey
from gateway.errors import Unauthorized
from gateway.keys import AppKeys, RequestKeys
from gateway.tls import peer_name

PROBES = frozenset({"/healthz", "/readyz", "/metrics"})


def _identify(request: web.Request) -> tuple[str, ApiKey | None]:
    api_keys = request.app[AppKeys.api_keys]
    header = request.headers.get("Authorization")
    if api_keys is not None and header is not None:
        with contextlib.suppress(Unauthorized):
            key = api_keys.identify(header)
            return f"key:{key.name}", key
    subject = peer_name(request) if request.app[AppKeys.settings].mutual_tls else None
    if subject is None:
        return f"ip:{request.remote or 'unknown'}", None
    named = api_keys.named(subject) if api_keys is not None and header is None else None
    if named is not None:
        return f"key:{named.name}", named
    return f"cert:{subject}", None


@web.middleware
async def client_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Name the client (`RequestKeys.client`, `RequestKeys.api_key`) and hold one of its slots."""
    client, key = _identify(request)
    request[RequestKeys.client] = client
    request[RequestKeys.api_key] = key
    if request.path in PROBES:
        return await handler(request)
    # Plain calls rather than context managers: this runs on every request.
    drain, limiter = request.app[AppKeys.drain], request.app[AppKeys.limiter]
    drain.admit()
    try:
        limiter.acquire(client)
        try:
            return await handler(request)
        finally:
            limiter.release(client)
    finally:
        drain.done()
