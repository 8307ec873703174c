"""Typed application state: every `app[...]` key lives here, so imports never cycle."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from lockclient.protocols import TokenSource

if TYPE_CHECKING:
    from gateway.auth import ApiKeys
    from gateway.config import Settings
    from gateway.fencing import Fencer
    from gateway.metrics import Metrics
    from storage.protocols import ObjectStore


class AppKeys:
    """The keys of the gateway's `web.Application` state."""

    settings: web.AppKey[Settings] = web.AppKey("settings")
    metrics: web.AppKey[Metrics] = web.AppKey("metrics")
    api_keys: web.AppKey[ApiKeys | None] = web.AppKey("api_keys")
    tokens: web.AppKey[TokenSource | None] = web.AppKey("tokens")
    store: web.AppKey[ObjectStore] = web.AppKey("store")
    fencer: web.AppKey[Fencer] = web.AppKey("fencer")
