"""Frozen gateway settings, read from flags and from environment variables of the same names.

`--max-body` is also `FENCEGATE_MAX_BODY`, and so on; a flag given on the
command line wins over the environment (compose sets the environment). A
setting is one field of `Settings` (its type, default and help); its flag,
its variable and the conversion of their text (`PARSERS`, by the field's
type) follow from that, so a bad value gets the same message from either.
Every value is checked here, once, with a message that says the fix, before
the gateway opens or logs anything.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_type_hints

from gateway.durations import Duration, parse_duration
from gateway.errors import BadSetting
from gateway.eventloop import EVENT_LOOPS
from gateway.s3url import is_s3_url, parse_s3_url

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
# Most fenced requests committed in one transaction (one fsync); it bounds how long a batch holds its
# locks. Equal to storage.queued.DEFAULT_MAX_BATCH (a test holds them equal); not imported, so
# --help stays light.
DEFAULT_GROUP_COMMIT = 256
# PostgreSQL group-commit batches in flight at once per replica, each on a connection of its own. Equal to
# storage.postgresql.group_commit.DEFAULT_LANES (a test holds them equal); not imported, for the same reason.
DEFAULT_COMMIT_LANES = 2
# The most each whole-number setting takes, shown in --help; more is refused, not clamped. A body is
# held in memory whole (1 GiB: objects are values, not files); a batch holds its row locks until it
# commits (past 10,000 one slow batch stalls every request in it); each commit lane keeps one of the
# 20 connections of a replica's pool (storage.engine), and the plain reads need four.
MAX_PORT = 65535
MAX_MAX_BODY = 1024**3
MAX_GROUP_COMMIT = 10_000
MAX_COMMIT_LANES = 16
# A retry may come this long after its request and still get the first outcome: a client retries for
# minutes or hours after an outage, not days (Stripe keeps its keys as long); then the key is forgotten.
DEFAULT_IDEMPOTENCY_TTL = Duration(24 * 3600)
SHOWN = 40  # characters of a bad value an error message repeats
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
SQLITE_FILE = "fencegate.db"
# What an http(s) upstream's mode relies on for the order of the writes it applies. `conditional`: the
# upstream's own compare-and-swap on its strong ETags (RFC 9110 If-Match / If-None-Match: *), probed at
# start; `trust-path`: the upstream applies whatever arrives, so the order is the path's to keep.
CONDITIONAL = "conditional"
UPSTREAM_ORDERINGS = (CONDITIONAL, "trust-path")
# trust-path: the one replica's claim on its database is renewed this often, and runs out after
# STALE_BEATS periods without a beat (a crashed replica blocks the next one that long, 10 s).
DEFAULT_UPSTREAM_HEARTBEAT = 2.0
STALE_BEATS = 5


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything `create_app` needs; immutable once built."""

    storage: str | None = field(
        default=None, metadata={"help": "storage URL: sqlite:///PATH or postgresql://..."}
    )
    data_dir: Path = field(default=DEFAULT_DATA_DIR, metadata={"help": "where the default SQLite file lives"})
    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on"})
    port: int = field(default=8080, metadata={"help": "port to listen on", "most": MAX_PORT})
    max_body: int = field(
        default=DEFAULT_MAX_BODY, metadata={"help": "largest accepted body, bytes", "most": MAX_MAX_BODY}
    )
    request_timeout: float = field(default=30.0, metadata={"help": "seconds a request may take (then 503)"})
    storage_timeout: float = field(
        default=10.0,
        metadata={
            "help": "seconds one PostgreSQL command, or a whole plain read, may take "
            "(SQLite waits out its busy timeout)"
        },
    )
    upstream: str | None = field(
        default=None,
        metadata={
            "help": "proxy mode: forward to this HTTP service, or fence an S3 store by its own conditional "
            "writes: s3://BUCKET[/PREFIX]"
        },
    )
    upstream_endpoint: str | None = field(
        default=None,
        metadata={
            "help": "proxy mode, s3:// upstream: the S3 endpoint URL of a non-AWS store (unset: AWS's, "
            "from the region); region and credentials come from the AWS environment and config files"
        },
    )
    upstream_timeout: float = field(
        default=10.0, metadata={"help": "seconds to wait for the upstream (then 504)"}
    )
    upstream_ca: Path | None = field(
        default=None,
        metadata={
            "help": "proxy mode: trust only this PEM CA (never the system's store) for the certificate of "
            "an https --upstream; its host name is still checked"
        },
    )
    upstream_cert: Path | None = field(
        default=None,
        metadata={
            "help": "proxy mode: present this PEM client certificate (chain) to an https --upstream that "
            "requires mutual TLS; needs --upstream-key"
        },
    )
    upstream_key: Path | None = field(
        default=None, metadata={"help": "the unencrypted PEM private key of --upstream-cert"}
    )
    upstream_ordering: str | None = field(
        default=None,
        metadata={
            "help": "proxy mode: what keeps an http(s) --upstream's writes in token order; required with "
            "one. conditional: every write is a PUT conditional on the upstream's strong ETag (If-Match, "
            "If-None-Match: *), so the upstream itself refuses a stale one, through any number of replicas "
            "(probed at start: an upstream that fails is refused). trust-path: the upstream applies writes "
            "unconditionally, so this gateway trusts the path to it not to delay or reorder them (a "
            "request that timed out may still land after a newer one), and it refuses to start beside "
            "another trust-path replica on its database"
        },
    )
    upstream_heartbeat: float = field(
        default=DEFAULT_UPSTREAM_HEARTBEAT,
        metadata={
            "help": f"trust-path: seconds between the replica's heartbeats to its database; a replica "
            f"that stopped without a clean shutdown blocks the next one for {STALE_BEATS} of them"
        },
    )
    tokens: str | None = field(
        default=None,
        metadata={
            "help": "token source URL for the guard against tokens from the future: sqlite:///PATH, "
            "postgresql://..., zookeeper://HOST:PORT[,HOST:PORT...], etcd://HOST:PORT[,HOST:PORT...]"
            "[?use_ssl=true&ca=CA&certfile=CRT&keyfile=KEY] "
            "(the source the clients draw from); unset, the guard is off"
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
        default=DEFAULT_GROUP_COMMIT,
        metadata={
            "help": "most fenced requests committed in one transaction (0: a transaction per request)",
            "most": MAX_GROUP_COMMIT,
        },
    )
    commit_lanes: int = field(
        default=DEFAULT_COMMIT_LANES,
        metadata={
            "help": "PostgreSQL: group-commit batches in flight at once, each on its own connection; "
            "1 when several replicas share one PostgreSQL (less CPU per request there)",
            "most": MAX_COMMIT_LANES,
        },
    )
    idempotency_ttl: Duration = field(
        default=DEFAULT_IDEMPOTENCY_TTL,
        metadata={
            "help": "how long an Idempotency-Key's first outcome is kept for its retries "
            "(30s, 15m, 24h, 7d); then the record is deleted in the background and the key may be used afresh"
        },
    )
    audit_retention: Duration | None = field(
        default=None,
        metadata={
            "help": "archive audit entries older than this (30s, 15m, 24h, 7d) to --audit-archive-dir, "
            "checked, then delete them from the database; unset, the trail is kept whole"
        },
    )
    audit_archive_dir: Path | None = field(
        default=None, metadata={"help": "the directory --audit-retention writes its archives to"}
    )
    tls_cert: Path | None = field(
        default=None, metadata={"help": "serve HTTPS with this PEM certificate (chain); needs --tls-key"}
    )
    tls_key: Path | None = field(default=None, metadata={"help": "the PEM private key of --tls-cert"})
    tls_client_ca: Path | None = field(
        default=None,
        metadata={
            "help": "mutual TLS: require a client certificate signed by this PEM CA; its subject CN names "
            "the client (and its API key entry)"
        },
    )

    def __post_init__(self) -> None:
        if not 0 <= self.port <= MAX_PORT:
            raise BadSetting(
                f"port {_short(self.port)} is out of range; give 0..{MAX_PORT} (0 picks a free port)"
            )
        if self.event_loop not in EVENT_LOOPS:
            raise BadSetting(f"event_loop {self.event_loop!r} is not one of {', '.join(EVENT_LOOPS)}")
        if self.group_commit < 0:
            raise BadSetting(
                f"group_commit {_short(self.group_commit)} is negative; give 0 (off) or a batch size"
            )
        if self.commit_lanes < 1:
            raise BadSetting(f"commit_lanes {_short(self.commit_lanes)} must be at least 1")
        if self.max_body < 0:
            raise BadSetting(f"max_body {_short(self.max_body)} is negative; give a size in bytes")
        for f in fields(self):
            most = f.metadata.get("most")
            if most is not None and getattr(self, f.name) > most:
                raise BadSetting(f"{f.name} {_short(getattr(self, f.name))} {_too_big(most)}")
        if self.max_client_requests < 1:
            raise BadSetting(f"max_client_requests {self.max_client_requests} must be at least 1")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise BadSetting("give --tls-cert and --tls-key together (the certificate and its private key)")
        if (self.upstream_cert is None) != (self.upstream_key is None):
            raise BadSetting(
                "give --upstream-cert and --upstream-key together (the client certificate the gateway "
                "presents to the upstream and its private key)"
            )
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise BadSetting("--tls-client-ca needs HTTPS: give --tls-cert and --tls-key too")
        # With client certificates required, only holders of the CA's certificates get in: not open.
        if self.api_keys is None and not self.loopback and not self.allow_open and not self.mutual_tls:
            raise BadSetting(
                f"refusing to serve {self.host} without API keys: anyone who can reach it could push every "
                "mark; give --api-keys FILE (see `fencegate keys add`) or --tls-client-ca CA, listen on "
                "127.0.0.1, or pass --allow-open if a network boundary already keeps strangers out"
            )
        for name in (
            "request_timeout",
            "storage_timeout",
            "upstream_timeout",
            "upstream_heartbeat",
            "idle_timeout",
        ):
            seconds = getattr(self, name)
            if not (math.isfinite(seconds) and seconds > 0):  # nan passes `<= 0`, and no timer takes it
                raise BadSetting(f"{name} must be a positive number of seconds, not {seconds!r}")
        if not (math.isfinite(self.idempotency_ttl) and self.idempotency_ttl > 0):
            ttl = self.idempotency_ttl
            raise BadSetting(f"idempotency_ttl must be a positive duration, not {ttl!r}")
        if (self.audit_retention is None) != (self.audit_archive_dir is None):
            raise BadSetting(
                "give --audit-retention and --audit-archive-dir together (how old an entry is archived, "
                "and where to)"
            )
        if self.audit_retention is not None and not (
            math.isfinite(self.audit_retention) and self.audit_retention > 0
        ):
            raise BadSetting(f"audit_retention must be a positive duration, not {self.audit_retention!r}")
        if self.audit_archive_dir is not None and not self.audit_archive_dir.is_dir():
            raise BadSetting(
                f"--audit-archive-dir {self.audit_archive_dir} is not a directory; make it, or give one"
            )
        if self.storage is not None:
            check_storage_url(self.storage)
        if self.upstream is not None and not is_s3_url(self.upstream):
            check_upstream_url(self.upstream)
        check_s3_upstream(self.upstream, self.upstream_endpoint)
        if self.upstream_ca is not None or self.upstream_cert is not None:
            check_upstream_tls(
                self.upstream_ca, self.upstream_cert, self.upstream_key, upstream=self.upstream
            )
        check_upstream_ordering(self.upstream, self.upstream_ordering)

    @property
    def storage_url(self) -> str:
        """The storage URL, defaulting to a SQLite file in `data_dir`."""
        return self.storage or f"sqlite:///{(self.data_dir / SQLITE_FILE).resolve()}"

    @property
    def mutual_tls(self) -> bool:
        """Whether every client must present a certificate of `tls_client_ca`."""
        return self.tls_client_ca is not None

    @property
    def loopback(self) -> bool:
        """Whether the gateway listens on loopback only (it may then run without API keys)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def check_storage_url(url: str) -> None:
    """Refuse a storage URL the storage cannot open, before anything starts or is logged."""
    from lockclient.transport.endpoint import redact
    from storage.engine import normalize_url  # loads SQLAlchemy: only once there is a URL to check
    from storage.errors import BadStorageURL

    try:
        normalize_url(url)
    except BadStorageURL as exc:
        raise BadSetting(f"storage {redact(url)!r}: {exc}") from None


def check_upstream_url(url: str) -> None:
    """Refuse an upstream the proxy could never reach: not http(s), no host, a port that cannot be."""
    from lockclient.transport.endpoint import is_http_url, redact  # one check, one mask for URLs

    if not is_http_url(url):
        raise BadSetting(
            f"upstream {redact(url)!r} is not an http(s) URL with a host (and a port from 1 to 65535); "
            "e.g. http://10.0.0.5:9000/store"
        )


def check_s3_upstream(upstream: str | None, endpoint: str | None) -> None:
    """Refuse a malformed s3:// upstream, or `--upstream-endpoint` without one or not http(s)."""
    from lockclient.transport.endpoint import is_http_url, redact

    if upstream is not None and is_s3_url(upstream):
        parse_s3_url(upstream)
    if endpoint is None:
        return
    if upstream is None or not is_s3_url(upstream):
        raise BadSetting(
            "--upstream-endpoint names the store of an s3:// upstream: give --upstream s3://BUCKET too, or "
            "drop --upstream-endpoint"
        )
    if not is_http_url(endpoint):
        raise BadSetting(
            f"upstream endpoint {_short(redact(endpoint))!r} is not an http(s) URL with a host (and a port "
            "from 1 to 65535); e.g. http://127.0.0.1:8333"
        )


def check_upstream_ordering(upstream: str | None, ordering: str | None) -> None:
    """Refuse an http(s) upstream without `--upstream-ordering` (the unconditional mode is taken only by
    its name), a value that is not one, and the setting without an upstream."""
    from urllib.parse import urlsplit

    from lockclient.transport.endpoint import redact

    if ordering is not None and ordering not in UPSTREAM_ORDERINGS:
        raise BadSetting(
            f"--upstream-ordering {_short(ordering)!r} is not one of {', '.join(UPSTREAM_ORDERINGS)}"
        )
    if upstream is None:
        if ordering is not None:
            raise BadSetting(
                f"--upstream-ordering {ordering} needs proxy mode: give --upstream URL too, or drop it"
            )
        return
    if ordering is not None and is_s3_url(upstream):
        raise BadSetting(
            f"--upstream-ordering {ordering} is for an http(s) upstream; an s3:// upstream is "
            "always fenced by the store's conditional writes: drop --upstream-ordering"
        )
    if ordering is None and urlsplit(upstream).scheme in ("http", "https"):
        raise BadSetting(
            f"upstream {redact(upstream)!r} applies whatever the gateway forwards, unconditionally: safe "
            "only while the path to it never delays or reorders a request (one that timed out may land "
            "after a newer token's) and one gateway forwards to it; give --upstream-ordering trust-path "
            "to run it so (one replica per database), or --upstream-ordering conditional if the upstream "
            "does conditional PUTs on strong ETags (RFC 9110), so it refuses a stale write itself"
        )


def check_upstream_tls(ca: Path | None, cert: Path | None, key: Path | None, *, upstream: str | None) -> None:
    """Refuse `--upstream-ca` or `--upstream-cert`/`--upstream-key` without an https upstream, or files
    that do not load. They are read here, as `--tls-client-ca` is before serving, so a bad file is one
    line before anything is logged; the proxy reads them again when it opens its session."""
    from urllib.parse import urlsplit

    if upstream is None or urlsplit(upstream).scheme != "https":
        flags = [
            flag
            for flag, path in (("--upstream-ca", ca), ("--upstream-cert", cert), ("--upstream-key", key))
            if path is not None
        ]
        given = " and ".join([", ".join(flags[:-1]), flags[-1]] if len(flags) > 1 else flags)
        need = "needs" if len(flags) == 1 else "need"
        raise BadSetting(
            f"{given} {need} an https upstream: give --upstream https://HOST/... too (a plain http "
            f"upstream has no certificate to check and takes none), or drop {given}"
        )
    from gateway.tls import upstream_context  # loads aiohttp: only once there is a file to check

    upstream_context(ca, cert, key)


def _short(value: object) -> str:
    """`value` as a message repeats it: masked (a URL given to a number's flag may hold a password), at
    most SHOWN characters, so a pasted megabyte stays one line."""
    from lockclient.transport.endpoint import redact

    text = str(value)
    text = redact(text) if "@" in text else text
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def _too_big(most: int) -> str:
    return f"is out of range; give at most {most}"


class _OutOfRange(ValueError):
    """A whole number too long for `int()` to read (Python stops at 4,300 digits): no setting takes it."""


Parse = Callable[[str], object]


def _whole_number(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        if raw.strip().lstrip("+-").isdigit():
            raise _OutOfRange("is out of range") from None
        raise ValueError("is not a whole number") from None


def _number(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError("is not a number") from None


def _yes_no(raw: str) -> bool:
    if raw.lower() not in _TRUE + _FALSE:
        raise ValueError("is not a yes/no value; give 1 or 0")
    return raw.lower() in _TRUE


# How a flag's or a variable's text becomes a setting, by the setting's type: the one table for both.
PARSERS: dict[type, Parse] = {
    int: _whole_number,
    float: _number,
    bool: _yes_no,
    Path: Path,
    str: str,
    Duration: parse_duration,
}
# a str setting's flag shows its own name
METAVARS = {int: "N", float: "SECONDS", Path: "PATH", Duration: "DURATION"}


@dataclass(frozen=True)
class _Option:
    """One setting as the command line and the environment see it."""

    name: str
    kind: type
    default: object
    help: str
    most: int | None = None  # the largest value taken, for a whole number

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parse(self, raw: str, source: str) -> object:
        """`raw` as the setting; a bad value is repeated in the message cut to SHOWN characters."""
        try:
            value = PARSERS[self.kind](raw)
        except _OutOfRange as exc:
            fix = f"; give at most {self.most}" if self.most is not None else ""
            raise BadSetting(f"{source} {_short(raw.strip())!r} {exc}{fix}") from None
        except ValueError as exc:
            raise BadSetting(f"{source} {_short(raw)!r} {exc}") from None
        if self.most is not None and isinstance(value, int) and value > self.most:
            raise BadSetting(f"{source} {_short(raw.strip())!r} {_too_big(self.most)}")
        return value


def options_of(settings: type[Any]) -> tuple[_Option, ...]:
    """Every field of a settings dataclass with its type resolved (`Path | None`: a Path that may be unset);
    a type without a parser fails here, at import, not when a user first sets it."""
    hints = get_type_hints(settings)
    options = []
    for f in fields(settings):
        kinds = [kind for kind in get_args(hints[f.name]) or (hints[f.name],) if kind is not type(None)]
        if len(kinds) != 1 or kinds[0] not in PARSERS:
            raise TypeError(
                f"{settings.__name__}.{f.name}: no parser for {hints[f.name]}; add one to PARSERS"
            )
        options.append(_Option(f.name, kinds[0], f.default, f.metadata["help"], f.metadata.get("most")))
    return tuple(options)


OPTIONS = options_of(Settings)


def env_name(name: str) -> str:
    """The environment variable of a setting: `max_body` is `FENCEGATE_MAX_BODY`."""
    return ENV_PREFIX + name.upper()


def _shown(default: object) -> str:
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "on" if default else "off"
    return str(default)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting (`--max-body`), each also read from `FENCEGATE_MAX_BODY`."""
    for option in OPTIONS:
        most = "" if option.most is None else f", at most {option.most}"
        text = f"{option.help}{most} (default: {_shown(option.default)}; env {env_name(option.name)})"
        text = text.replace("%", "%%")  # argparse formats help with %
        if option.kind is bool:
            parser.add_argument(option.flag, dest=option.name, action="store_const", const="1", help=text)
        else:
            metavar = METAVARS.get(option.kind, option.name.upper())
            parser.add_argument(option.flag, dest=option.name, metavar=metavar, help=text)


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Settings from parsed flags, falling back to the environment, then the defaults."""
    values: dict[str, object] = {}
    for option in OPTIONS:
        raw, source = getattr(args, option.name, None), option.flag
        if raw is None:
            raw, source = environ.get(env_name(option.name)) or None, env_name(option.name)
        if raw is not None:
            values[option.name] = option.parse(raw, source)
    return Settings(**values)  # type: ignore[arg-type]
