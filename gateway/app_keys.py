"""Typed app and request state: every `app[...]` and `request[...]` key, in one module (no cycles)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from lockclient.protocols import TokenSource

if TYPE_CHECKING:
    from gateway.admission import ClientLimiter, Drain
    from gateway.audit import AuditLog
    from gateway.auth import ApiKeys, Credentials
    from gateway.config import Settings
    from gateway.fencing import Fencer
    from gateway.metrics import Metrics
    from gateway.readiness import Readiness
    from gateway.replica import OneReplica
    from storage.fenced import Policy
    from storage.protocols import ObjectStore


class AppKeys:
    """The keys of the gateway's `web.Application` state."""

    settings: web.AppKey[Settings] = web.AppKey("settings")
    policy: web.AppKey[Policy] = web.AppKey("policy")
    metrics: web.AppKey[Metrics] = web.AppKey("metrics")
    api_keys: web.AppKey[ApiKeys | None] = web.AppKey("api_keys")
    tokens: web.AppKey[TokenSource | None] = web.AppKey("tokens")
    store: web.AppKey[ObjectStore] = web.AppKey("store")
    fencer: web.AppKey[Fencer] = web.AppKey("fencer")
    limiter: web.AppKey[ClientLimiter] = web.AppKey("limiter")
    drain: web.AppKey[Drain] = web.AppKey("drain")
    readiness: web.AppKey[Readiness] = web.AppKey("readiness")
    audit: web.AppKey[AuditLog] = web.AppKey("audit")
    # False only in tests: the s3 or conditional http upstream's writes without their preconditions
    s3_conditional: web.AppKey[bool] = web.AppKey("s3_conditional")
    replica: web.AppKey[OneReplica | None] = web.AppKey("replica")  # trust-path proxy mode only


class RequestKeys:
    """The keys of per-request state, set by `client_middleware`."""

    client: web.RequestKey[str] = web.RequestKey("client")
    credentials: web.RequestKey[Credentials] = web.RequestKey("credentials")
