"""Resources of the app, each opened and closed in exactly one cleanup context.

They start in order (storage, then the fencer over it) and tear down in
reverse, only if start-up finished. Start-up also says, in the log, which
guards are off: no token source (no future-token guard), no API keys (open),
proxy mode (and its limit); and warns if the token source does not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import aiohttp
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.app_keys import AppKeys
from gateway.audit import AuditLog
from gateway.auth import ApiKeys
from gateway.errors import BadSetting, Unavailable
from gateway.fencing import Fencer, FutureGuard
from gateway.http_transport import conditional_http_store
from gateway.readiness import check_token_source
from gateway.replica import TRUST_PATH, OneReplica
from gateway.s3url import is_s3_url
from gateway.settings_checks import CONDITIONAL
from gateway.storage_tls import open_storage
from gateway.tls import upstream_context
from gateway.upstream import PROXY_LIMIT, UpstreamStore
from storage import SqlObjectStore, StorageError, migrate
from storage.chain import read_head
from storage.queued import QueuedStore
from storage.schema import MIGRATION_TIMEOUT
from storage.sqlite.group_commit import GroupCommitStore

log = logging.getLogger("gateway")

KEY_RELOAD_INTERVAL = 1.0  # seconds between looks at the key file: a revoked key stops working this fast


def make_data_dir(path: Path) -> None:
    """The directory of the default SQLite file; one that cannot be made is a bad setting, not a crash."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = "it is a file" if path.is_file() else exc.strerror
        raise BadSetting(
            f"data dir {path} cannot be made ({reason}); give --data-dir a directory you can write, or "
            "--storage a URL"
        ) from exc


async def migrate_storage(url: str) -> int:
    """Migrate on an engine of its own: a step over a large old store is not one request, so
    `--storage-timeout` does not cut it (it would, at every start, on every replica)."""
    engine = open_storage(url, command_timeout=MIGRATION_TIMEOUT)
    try:
        return await migrate(engine)
    finally:
        await engine.dispose()


async def storage_ctx(app: web.Application) -> AsyncIterator[None]:
    """The engine (migrated), the store over it, and in proxy mode the upstream session."""
    settings, policy = app[AppKeys.settings], app[AppKeys.policy]
    if settings.storage is None:
        make_data_dir(settings.data_dir)
    engine = open_storage(settings.storage_url, command_timeout=settings.storage_timeout)
    try:
        version = await migrate_storage(settings.storage_url)
    except StorageError as exc:  # the one line on stderr says the fix; the log keeps what the driver said
        log.error("storage %s not ready: %s", engine.url.render_as_string(), exc.__cause__ or exc)
        await engine.dispose()
        raise
    try:  # from here on the store served, so its chain head is logged at the end
        log.info("storage %s ready (schema version %d)", engine.url.render_as_string(), version)
        if not policy.fence:
            log.warning("THE FENCE IS OFF: a benchmark yardstick; every token is accepted")
        if settings.upstream is not None:
            policy = replace(policy, objects=False)  # the bytes live upstream
        fences = SqlObjectStore(engine, policy=policy)
        if settings.upstream is None and settings.group_commit > 0:
            batching: QueuedStore
            if engine.dialect.name == "sqlite":
                assert engine.url.database is not None
                batching = GroupCommitStore(
                    fences, path=engine.url.database, max_batch=settings.group_commit, policy=policy
                )
            else:
                from storage.postgresql.group_commit import (
                    PgGroupCommitStore,  # asyncpg: the [postgresql] extra
                )

                batching = PgGroupCommitStore(
                    fences,
                    engine=engine,
                    max_batch=settings.group_commit,
                    lanes=settings.commit_lanes,
                    policy=policy,
                    timeout=settings.storage_timeout,
                )
            await batching.start()
            lanes = (
                ""
                if engine.dialect.name == "sqlite"
                else f", {settings.commit_lanes} batch(es) in flight at once"
            )
            log.info("group commit on: up to %d fenced requests per commit%s", settings.group_commit, lanes)
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
        if is_s3_url(settings.upstream):
            from gateway.s3proxy import s3_store  # aiobotocore: only for an s3 upstream

            conditional = app.get(AppKeys.s3_conditional, True)
            async with s3_store(settings, fences, app[AppKeys.metrics], conditional=conditional) as store:
                app[AppKeys.store] = store
                yield
            return
        timeout = aiohttp.ClientTimeout(total=None, connect=settings.upstream_timeout)
        # without --upstream-ca or --upstream-cert, aiohttp's default: the system's store, no client
        # certificate; the session closes the connector
        tls = upstream_context(settings.upstream_ca, settings.upstream_cert, settings.upstream_key)
        connector = None if tls is None else aiohttp.TCPConnector(ssl=tls)
        async with aiohttp.ClientSession(
            timeout=timeout, auto_decompress=False, connector=connector
        ) as session:
            if settings.upstream_ordering == CONDITIONAL:
                app[AppKeys.store] = await conditional_http_store(
                    settings, fences=fences, engine=engine, session=session, metrics=app[AppKeys.metrics],
                    conditional=app.get(AppKeys.s3_conditional, True),
                )  # fmt: skip
                yield
                return
            replica = app[AppKeys.replica]
            app[AppKeys.store] = UpstreamStore(
                fences=fences,
                session=session,
                base_url=settings.upstream,
                timeout=settings.upstream_timeout,
                exclusive=None if replica is None else replica.check,
            )
            log.warning("upstream proxy mode, forwarding to %s: %s", settings.upstream, PROXY_LIMIT)
            if settings.upstream_ca is not None:
                log.info("upstream certificate: trusting only the CA in %s", settings.upstream_ca)
            if settings.upstream_cert is not None:
                log.info("upstream mutual TLS: presenting the client certificate %s", settings.upstream_cert)
            yield
    finally:
        await _log_chain_head(engine)
        await engine.dispose()


async def _log_chain_head(engine: AsyncEngine) -> None:
    """Log the audit chain's head at shutdown, to be kept apart from the database (docs/operations.md)."""
    try:
        head = await read_head(engine)
    except StorageError as exc:
        log.warning("audit chain head not read at shutdown: %s", exc)
        return
    log.info("audit chain head at shutdown %s (keep it: fencegate audit verify --head %s)", head, head)


async def fencer_ctx(app: web.Application) -> AsyncIterator[None]:
    """The fencer and its future-token guard; the token source (if any) is closed with the app."""
    tokens = app[AppKeys.tokens]
    if tokens is None:
        log.warning(
            "no token source configured: the token-from-the-future guard is OFF; a client sending a huge "
            "token can fence out every other client"
        )
    else:
        try:
            await check_token_source(tokens)
            log.info("token source %r: the token-from-the-future guard is on", tokens)
        except Unavailable as exc:
            log.warning(
                "%s; serving anyway, but /readyz answers 503 and a write whose token is above the cached "
                "bound is refused 503 until the source answers",
                exc,
            )
    guard = FutureGuard(tokens, metrics=app[AppKeys.metrics])
    app[AppKeys.fencer] = Fencer(store=app[AppKeys.store], guard=guard, metrics=app[AppKeys.metrics])
    try:
        yield
    finally:
        if tokens is not None:
            await tokens.aclose()


async def _follow_keys(keys: ApiKeys) -> None:
    while True:
        await asyncio.sleep(KEY_RELOAD_INTERVAL)
        try:
            if await asyncio.to_thread(keys.refresh):
                log.info("API keys reloaded: %d keys", len(keys))
        except BadSetting as exc:
            log.error("API keys not reloaded, keeping the previous ones: %s", exc)


async def auth_ctx(app: web.Application) -> AsyncIterator[None]:
    """Load the API keys and follow their file, or say loudly that the gateway is open."""
    settings = app[AppKeys.settings]
    if settings.api_keys is None:
        app[AppKeys.api_keys] = None
        banner = "!" * 72
        if settings.mutual_tls:
            log.warning(
                "no API keys: client certificates of %s are required, and every one of them may write and "
                "move every mark; give --api-keys FILE to scope them (an entry named after the subject CN)",
                settings.tls_client_ca,
            )
        elif settings.loopback:
            log.warning(
                "%s\nNO API KEYS: running OPEN on loopback (%s); any local process can write and move "
                "marks. Give --api-keys FILE (fencegate keys add) before exposing it.\n%s",
                banner,
                settings.host,
                banner,
            )
        else:
            log.warning(
                "%s\nNO API KEYS and listening on %s (--allow-open): ANYONE who can reach it can write and "
                "move marks; configure --api-keys\n%s",
                banner,
                settings.host,
                banner,
            )
        yield
        return
    keys = ApiKeys.load(settings.api_keys)
    app[AppKeys.api_keys] = keys
    log.info("API keys from %s: %d keys, re-read when the file changes", settings.api_keys, len(keys))
    follower = asyncio.create_task(_follow_keys(keys), name="fencegate-api-keys")
    try:
        yield
    finally:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower


async def audit_ctx(app: web.Application) -> AsyncIterator[None]:
    """The audit log of refusals, flushed in the background and once more at shutdown."""
    audit = AuditLog(app[AppKeys.store], metrics=app[AppKeys.metrics])
    app[AppKeys.audit] = audit
    flusher = asyncio.create_task(audit.run(), name="fencegate-audit")
    try:
        yield
    finally:
        flusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await flusher
        await audit.flush()


async def ordering_ctx(app: web.Application) -> AsyncIterator[None]:
    """The upstream ordering's gauge and, for trust-path, the one replica's claim and its heartbeat.

    First of the contexts, so a refused second replica says so before anything else is logged.
    """
    settings = app[AppKeys.settings]
    app[AppKeys.replica] = None
    if settings.upstream_ordering is None:
        yield
        return
    app[AppKeys.metrics].upstream_ordering.labels(mode=settings.upstream_ordering).set(1)
    if settings.upstream_ordering != TRUST_PATH:
        yield
        return
    if settings.storage is None:
        make_data_dir(settings.data_dir)
    await migrate_storage(settings.storage_url)  # the claims' table may not be there yet
    engine = open_storage(settings.storage_url, command_timeout=settings.storage_timeout)
    try:
        replica = OneReplica(engine, period=settings.upstream_heartbeat)
        await replica.start()
        log.info(
            "trust-path: this gateway is the one replica on its database (instance %s); heartbeat every "
            "%s s, a crash blocks the next replica for %s s",
            replica.instance,
            replica.period,
            replica.window,
        )
        app[AppKeys.replica] = replica
        beating = asyncio.create_task(replica.run(), name="fencegate-replica-heartbeat")
        try:
            yield
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
            await replica.aclose()
    finally:
        await engine.dispose()
