"""The gateway's storage engine: `storage.open_engine` with libpq's TLS parameters in the URL.

They are read by `lockclient.postgres_tls`, the helper the PostgreSQL token
source uses, so `--storage` and `--tokens` take one syntax with one
implementation, while storage and lockclient know nothing of each other
(docs/architecture.md): the gateway, which may import both, joins them here.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from lockclient.errors import ConfigurationError, TLSError
from lockclient.postgres_tls import split_tls
from storage import BadStorageURL, StorageUnavailable, open_engine
from storage.engine import DoConnect

__all__ = ["open_storage", "read_tls"]


def open_storage(url: str, *, command_timeout: float = 10.0) -> AsyncEngine:
    """An engine for `url` (SQLite, or PostgreSQL with or without TLS); its owner must dispose of it."""
    return open_engine(url, command_timeout=command_timeout, tls=read_tls)


def read_tls(url: str) -> tuple[str, DoConnect]:
    """`storage.engine.TLSReader`: a bad parameter is `BadStorageURL` before connecting; a failed
    handshake is `StorageUnavailable` naming the server and the reason, never a plaintext retry."""
    try:
        target, tls = split_tls(url)
    except ConfigurationError as exc:
        raise BadStorageURL(f"storage URL: {exc}") from exc

    def connect(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        try:
            return tls.do_connect(dialect, record, cargs, cparams)
        except TLSError as exc:
            raise StorageUnavailable(f"storage could not connect: {exc}") from exc

    return target, connect
