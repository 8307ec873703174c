"""Resources of the app, each opened and closed in exactly one cleanup context.

They start in order (storage, then the fencer over it) and tear down in
reverse, only if start-up finished. Start-up also says, in the log, which
guards are off: no token source (no future-token guard), no API keys (open),
proxy mode (and its limit).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from gateway.auth import ApiKeys
from gateway.fencing import Fencer, FutureGuard
from gateway.keys import AppKeys
from gateway.upstream import PROXY_LIMIT, UpstreamStore
from storage import SqlObjectStore, migrate, open_engine
from storage.batch import GroupCommitStore

log = logging.getLogger("gateway")


async def storage_ctx(app: web.Application) -> AsyncIterator[None]:
    """The engine (migrated), the store over it, and in proxy mode the upstream session."""
    settings = app[AppKeys.settings]
    if settings.storage is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = open_engine(settings.storage_url, command_timeout=settings.storage_timeout)
    try:
        version = await migrate(engine)
        log.info("storage %s ready (schema version %d)", engine.url.render_as_string(), version)
        fences = SqlObjectStore(engine)
        if settings.upstream is None and engine.dialect.name == "sqlite" and settings.group_commit > 0:
            assert engine.url.database is not None
            batching = GroupCommitStore(fences, path=engine.url.database, max_batch=settings.group_commit)
            await batching.start()
            log.info("SQLite group commit on: up to %d fenced requests per fsync", settings.group_commit)
            app[AppKeys.store] = batching
            try:
                yield
            finally:
                await batching.aclose()
            return
        if settings.upstream is None:
            app[AppKeys.store] = fences
            yield
            return
        timeout = aiohttp.ClientTimeout(total=None, connect=settings.upstream_timeout)
        async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
            app[AppKeys.store] = UpstreamStore(
                fences=fences, session=session, base_url=settings.upstream, timeout=settings.upstream_timeout
            )
            log.warning("upstream proxy mode, forwarding to %s: %s", settings.upstream, PROXY_LIMIT)
            yield
    finally:
        await engine.dispose()


async def fencer_ctx(app: web.Application) -> AsyncIterator[None]:
    """The fencer and its future-token guard; the token source (if any) is closed with the app."""
    tokens = app[AppKeys.tokens]
    if tokens is None:
        log.warning(
            "no token source configured: the token-from-the-future guard is OFF; a client sending a huge "
            "token can fence out every other client"
        )
    guard = FutureGuard(tokens, metrics=app[AppKeys.metrics])
    app[AppKeys.fencer] = Fencer(store=app[AppKeys.store], guard=guard, metrics=app[AppKeys.metrics])
    try:
        yield
    finally:
        if tokens is not None:
            await tokens.aclose()


async def auth_ctx(app: web.Application) -> AsyncIterator[None]:
    """Load the API keys, or say loudly that the gateway is open."""
    settings = app[AppKeys.settings]
    if settings.api_keys is not None:
        app[AppKeys.api_keys] = ApiKeys.load(settings.api_keys)
    else:
        app[AppKeys.api_keys] = None
        if settings.loopback:
            log.warning("no API keys configured: running open on loopback (%s)", settings.host)
        else:
            log.warning(
                "no API keys configured and listening on %s: ANYONE who can reach it can write; "
                "configure --api-keys",
                settings.host,
            )
    yield
