"""`fencegate serve`: run the gateway as a process.

Every flag is also an environment variable of the same name
(`--max-body` is `FENCEGATE_MAX_BODY`); a flag wins. The process serves
until SIGTERM or SIGINT, then stops accepting connections, answers new
requests on open connections 503 `shutting_down`, lets the requests in
flight finish (up to `SHUTDOWN_GRACE`, bodies still arriving included), and
only then closes connections and storage (the group commit commits what is
queued first). Nothing acknowledged is lost: an answer is sent only after
its commit. It logs the address it listens on, so
`--port 0` can be used and read back.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from aiohttp import web

from gateway.app import create_app
from gateway.app_keys import AppKeys
from gateway.config import Settings
from gateway.contexts import make_data_dir
from gateway.errors import BadSetting, CannotListen
from gateway.settings_cli import settings_from
from gateway.tls import server_context
from lockclient import open_token_source
from storage.fenced import FENCED, Policy

log = logging.getLogger("gateway")

SHUTDOWN_GRACE = 10.0  # seconds for requests in flight to finish after SIGTERM
CLOSE_GRACE = 1.0  # seconds for handlers still running after the drain, before they are cancelled

T = TypeVar("T")


async def _serve(settings: Settings, policy: Policy) -> None:
    # before anything opens: a bad certificate is a bad setting
    tls = server_context(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
    # a bad token source URL is a bad setting too: refused before the data dir is made (the source
    # connects on its first draw, so there is nothing to close if the data dir then fails)
    tokens = open_token_source(settings.tokens) if settings.tokens else None
    if settings.storage is None:  # storage_ctx makes it too, but only after the banner is logged
        make_data_dir(settings.data_dir)
    app = create_app(settings, tokens=tokens, policy=policy)
    # Requests are drained first (below); what is left when the runner shuts down gets a short grace.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=CLOSE_GRACE)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.host, settings.port, ssl_context=tls, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            raise CannotListen(settings.host, settings.port, exc) from exc
        loop = asyncio.get_running_loop()
        kind = type(loop).__module__.split(".")[0]  # the loop running, not the setting
        scheme = "http" if tls is None else "https"
        clients = ", client certificates required" if settings.mutual_tls else ""
        for address in runner.addresses:
            host, port = address[:2]
            log.info(
                "fencegate gateway listening on %s://%s:%s (event loop: %s%s)",
                scheme,
                host,
                port,
                kind,
                clients,
            )
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        drain = app[AppKeys.drain]
        log.info("stopping: no new connections; finishing %d requests in flight", drain.in_flight)
        await site.stop()
        if not await drain.drain(SHUTDOWN_GRACE):
            log.warning("%d requests still in flight after %ss: cut off", drain.in_flight, SHUTDOWN_GRACE)
        log.info("stopping: closing connections and storage")
    finally:
        await runner.cleanup()
    log.info("stopped")


def check_listen(host: str, port: int) -> None:
    """Bind where the gateway will listen, and let go: a port in use or an address this machine does
    not have is refused before storage is opened or the start-up banner is logged."""
    try:
        for family, kind, proto, _, address in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        ):
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
                sock.bind(address)
    except OSError as exc:
        raise CannotListen(host, port, exc) from exc


def event_loop_runner(kind: str) -> Callable[[Coroutine[Any, Any, T]], T]:
    """`asyncio.run` for `kind` (one of `EVENT_LOOPS`, as `Settings` checked); found before any coroutine
    exists, so a missing uvloop leaves none behind.

    Why uvloop by default: under load the gateway is bound by the CPU of its one loop thread, where HTTP
    parsing and the group commit's statements share the time; uvloop's loop and transports are written
    in C and take less of it per request (in `fencegate bench` about 10-15% more fenced PUTs per second
    on SQLite). `--event-loop asyncio` keeps the standard loop: for a platform without uvloop, or to
    rule the loop out when debugging.
    """
    if kind == "asyncio":
        return asyncio.run
    try:
        import uvloop  # only when chosen: the asyncio choice must work without it
    except ImportError as exc:
        raise BadSetting(
            "event_loop uvloop is not installed on this platform; pip install uvloop, "
            "or pass --event-loop asyncio"
        ) from exc
    return uvloop.run


def run(args: argparse.Namespace, *, policy: Policy = FENCED) -> int:
    """`fencegate serve` until SIGTERM or SIGINT; a bad setting or a place it cannot listen raises before
    anything is opened. `policy` is the fenced unit's (only the benchmark changes it)."""
    settings = settings_from(args, os.environ)
    check_listen(settings.host, settings.port)
    event_loop_runner(settings.event_loop)(_serve(settings, policy))
    return 0
