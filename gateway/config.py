"""Frozen gateway settings, read from flags and from environment variables of the same names.

`--max-body` is also `FENCEGATE_MAX_BODY`, and so on; a flag given on the
command line wins over the environment (compose sets the environment). Every
value is checked here, once, with a message that says the fix.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import urlsplit

from gateway.errors import ConfigError
from gateway.eventloop import EVENT_LOOPS
from storage.batch import DEFAULT_MAX_BATCH

ENV_PREFIX = "FENCEGATE_"
DEFAULT_DATA_DIR = Path(".state/gateway")
DEFAULT_MAX_BODY = 16 * 1024 * 1024  # bytes; objects are values, not files
# A connection that has not sent a complete request in this long is closed: it
# bounds slow headers (slowloris) and idle keep-alive connections alike.
DEFAULT_IDLE_TIMEOUT = 15.0
# A client (an API key, or a peer address on an open gateway) may have this
# many requests in flight; more are answered 429 at once instead of queueing,
# so one client cannot take every connection slot or the write queue.
DEFAULT_MAX_CLIENT_REQUESTS = 256
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
SQLITE_FILE = "fencegate.db"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything `create_app` needs; immutable once built."""

    storage: str | None = field(
        default=None, metadata={"help": "storage URL: sqlite:///PATH or postgresql://..."}
    )
    data_dir: Path = field(default=DEFAULT_DATA_DIR, metadata={"help": "where the default SQLite file lives"})
    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on"})
    port: int = field(default=8080, metadata={"help": "port to listen on"})
    max_body: int = field(default=DEFAULT_MAX_BODY, metadata={"help": "largest accepted body, bytes"})
    request_timeout: float = field(default=30.0, metadata={"help": "seconds a request may take (then 503)"})
    storage_timeout: float = field(default=10.0, metadata={"help": "seconds one database command may take"})
    upstream: str | None = field(default=None, metadata={"help": "proxy mode: forward to this HTTP service"})
    upstream_timeout: float = field(
        default=10.0, metadata={"help": "seconds to wait for the upstream (then 504)"}
    )
    tokens: str | None = field(
        default=None,
        metadata={
            "help": "token source URL for the guard against tokens from the future: sqlite:///PATH, "
            "postgresql://..., zookeeper://HOST:PORT[,HOST:PORT...] (unset: the guard is off)"
        },
    )
    api_keys: Path | None = field(default=None, metadata={"help": "JSON file of hashed API keys and scopes"})
    allow_open: bool = field(
        default=False,
        metadata={"help": "serve a non-loopback address without API keys (anyone reaching it can write)"},
    )
    idle_timeout: float = field(
        default=DEFAULT_IDLE_TIMEOUT,
        metadata={"help": "seconds a connection may go without a complete request, or a body read may take"},
    )
    max_client_requests: int = field(
        default=DEFAULT_MAX_CLIENT_REQUESTS,
        metadata={"help": "requests one client may have in flight (then 429)"},
    )
    event_loop: str = field(
        default="uvloop", metadata={"help": "event loop: uvloop (faster under load) or asyncio"}
    )
    group_commit: int = field(
        default=DEFAULT_MAX_BATCH,
        metadata={
            "help": "SQLite: most fenced writes committed with one fsync (0: a transaction per request)"
        },
    )

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port {self.port} is out of range; give 0..65535 (0 picks a free port)")
        if self.event_loop not in EVENT_LOOPS:
            raise ConfigError(f"event_loop {self.event_loop!r} is not one of {', '.join(EVENT_LOOPS)}")
        if self.group_commit < 0:
            raise ConfigError(f"group_commit {self.group_commit} is negative; give 0 (off) or a batch size")
        if self.max_body < 0:
            raise ConfigError(f"max_body {self.max_body} is negative; give a size in bytes")
        if self.max_client_requests < 1:
            raise ConfigError(f"max_client_requests {self.max_client_requests} must be at least 1")
        if self.api_keys is None and not self.loopback and not self.allow_open:
            raise ConfigError(
                f"refusing to serve {self.host} without API keys: anyone who can reach it could push every "
                "mark; give --api-keys FILE (see `fencegate keys add`), listen on 127.0.0.1, or pass "
                "--allow-open if a network boundary already keeps strangers out"
            )
        for name in ("request_timeout", "storage_timeout", "upstream_timeout", "idle_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds")
        if self.upstream is not None:
            parts = urlsplit(self.upstream)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError(
                    f"upstream {self.upstream!r} is not an http(s) URL; e.g. http://10.0.0.5:9000/store"
                )

    @property
    def storage_url(self) -> str:
        """The storage URL, defaulting to a SQLite file in `data_dir`."""
        return self.storage or f"sqlite:///{(self.data_dir / SQLITE_FILE).resolve()}"

    @property
    def loopback(self) -> bool:
        """Whether the gateway listens on loopback only (it may then run without API keys)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def _env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _convert(name: str, raw: str) -> object:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} = {raw!r} is not a number") from exc
    if kind == "bool":
        if raw.lower() not in _TRUE + _FALSE:
            raise ConfigError(f"{name} = {raw!r} is not a yes/no value; give 1 or 0")
        return raw.lower() in _TRUE
    if kind in ("Path", "Path | None"):
        return Path(raw)
    return raw


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting (`--max-body`), each also read from `FENCEGATE_MAX_BODY`."""
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        text = f"{f.metadata['help']} (env {_env_name(f.name)})"
        if f.type == "bool":
            parser.add_argument(flag, dest=f.name, default=None, action="store_const", const="1", help=text)
        else:
            parser.add_argument(flag, dest=f.name, default=None, help=text)


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Settings from parsed flags, falling back to the environment, then the defaults."""
    values: dict[str, object] = {}
    for f in fields(Settings):
        raw = getattr(args, f.name, None)
        if raw is None:
            raw = environ.get(_env_name(f.name)) or None
        if raw is not None:
            values[f.name] = _convert(f.name, raw)
    return Settings(**values)  # type: ignore[arg-type]
