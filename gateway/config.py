"""Frozen gateway settings: every value the gateway takes, its default, its limit and its help.

A setting is one field of `Settings`; its flag and its environment variable
follow from that (`gateway.settings_cli`). Every value is checked here, once,
with a message that says the fix, before the gateway opens or logs anything;
the checks that read other modules are `gateway.settings_checks`'.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from gateway.durations import Duration
from gateway.errors import BadSetting
from gateway.s3url import is_s3_url
from gateway.settings_checks import (
    check_s3_upstream,
    check_storage_url,
    check_upstream_ordering,
    check_upstream_tls,
    check_upstream_url,
    short,
    too_big,
)
from storage.limits import DEFAULT_LANES, DEFAULT_MAX_BATCH

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
SQLITE_FILE = "fencegate.db"
# trust-path: the one replica's claim on its database is renewed this often, and runs out after
# STALE_BEATS periods without a beat (a crashed replica blocks the next one that long, 10 s).
DEFAULT_UPSTREAM_HEARTBEAT = 2.0
STALE_BEATS = 5
# The loops `fencegate serve` runs on (`gateway.serve.event_loop_runner`); uvloop by default, as it takes
# less of the one loop thread's CPU per request.
EVENT_LOOPS = ("uvloop", "asyncio")


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
        default=DEFAULT_MAX_BATCH,
        metadata={
            "help": "most fenced requests committed in one transaction (0: a transaction per request)",
            "most": MAX_GROUP_COMMIT,
        },
    )
    commit_lanes: int = field(
        default=DEFAULT_LANES,
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
                f"port {short(self.port)} is out of range; give 0..{MAX_PORT} (0 picks a free port)"
            )
        if self.event_loop not in EVENT_LOOPS:
            raise BadSetting(f"event_loop {self.event_loop!r} is not one of {', '.join(EVENT_LOOPS)}")
        if self.group_commit < 0:
            raise BadSetting(
                f"group_commit {short(self.group_commit)} is negative; give 0 (off) or a batch size"
            )
        if self.commit_lanes < 1:
            raise BadSetting(f"commit_lanes {short(self.commit_lanes)} must be at least 1")
        if self.max_body < 0:
            raise BadSetting(f"max_body {short(self.max_body)} is negative; give a size in bytes")
        for f in fields(self):
            most = f.metadata.get("most")
            if most is not None and getattr(self, f.name) > most:
                raise BadSetting(f"{f.name} {short(getattr(self, f.name))} {too_big(most)}")
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
