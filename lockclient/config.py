"""Redlock's defaults and retry policy, each tied to the algorithm step it serves.

Settings are frozen: a `Redlock` never changes how it behaves after it is
built, and a bad value is refused when it is given, with the fix.
"""

from __future__ import annotations

import ipaddress
import math
import numbers
import os
import posixpath
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeGuard, get_args
from urllib.parse import urlsplit

from lockclient.errors import ConfigurationError
from lockclient.protocols import TokenSource

__all__ = [
    "DEFAULT_DRIFT_FACTOR",
    "DEFAULT_KEY_PREFIX",
    "DEFAULT_MAX_EXTENSIONS",
    "DEFAULT_NODE_TIMEOUT",
    "DEFAULT_RETRY",
    "DEFAULT_TTL",
    "DEFAULT_UNREACHABLE",
    "DEFAULT_WATCHDOG_FRACTION",
    "MAX_RESOURCE_BYTES",
    "MAX_TTL",
    "CertReqs",
    "RedlockSettings",
    "RetryPolicy",
    "TLSSettings",
    "check_masters",
    "check_resource",
    "check_tokens",
    "check_ttl",
    "is_number",
    "require_positive",
]

# A lease's time to live in seconds when the caller gives none.
DEFAULT_TTL = 10.0
# Step 2: "the client uses a timeout which is small compared to the total lock auto-release time"
# (the paper's example: 5-50 ms for a 10 s TTL). A dead or hung master costs at most this much.
DEFAULT_NODE_TIMEOUT = 0.05
# Step 3: drift = ttl * factor + 2 ms; the paper uses 1 %.
DEFAULT_DRIFT_FACTOR = 0.01
# Step 6: extension is bounded so a stuck holder cannot keep a lock forever by extending it.
DEFAULT_MAX_EXTENSIONS = 10
# Step 7: the watchdog renews at a third of the TTL, as Redisson's lockWatchdogTimeout / 3 does,
# leaving two more chances before the key expires.
DEFAULT_WATCHDOG_FRACTION = 1 / 3
DEFAULT_KEY_PREFIX = "fencegate:lock:"
# An unreachable majority is an outage, not contention: a blocking acquire gives up after this many
# seconds of it (Redisson's defaults, 3 attempts 1.5 s apart, give up after about 4.5 s).
DEFAULT_UNREACHABLE = 5.0
# The longest TTL a lease (or an extension) may ask for: a year. A Redlock lease is meant to be short
# (step 7's watchdog keeps a long job's lease), and past this a TTL is almost surely a unit mistake
# (milliseconds given as seconds). It is far inside what Redis takes for PX and PEXPIRE (now + ttl in
# milliseconds must fit in a signed 64-bit integer, about 292 million years): a larger TTL got an
# error reply from every master, which looked like an outage and wasted a token per attempt.
MAX_TTL = 365 * 24 * 3600.0
# The longest resource name, in UTF-8 bytes: four times the gateway's 256 characters, so a name the
# gateway takes always fits, and small enough for every master and source (ZooKeeper escapes a name
# into a znode path up to three times its length). A longer one is almost surely data given by mistake.
MAX_RESOURCE_BYTES = 1024


def check_ttl(ttl: float, node_timeout: float) -> None:
    require_positive("ttl", ttl, "give the lease's time to live in seconds, e.g. 10.0")
    if ttl > MAX_TTL:
        raise ConfigurationError(
            f"ttl ({ttl!r}s) is above the maximum of {MAX_TTL:g}s (a year): give the lease's time to live "
            "in seconds (not milliseconds), and keep a long job's lease with auto_extend=True"
        )
    if node_timeout >= ttl:
        raise ConfigurationError(
            f"node_timeout ({node_timeout}s) must be much smaller than ttl ({ttl}s): "
            "a slow master would eat the whole validity; lower node_timeout or raise ttl"
        )


def check_masters(masters: Sequence[str]) -> None:
    """Refuse an empty list, an entry that is not a `str`, and one Redis server listed twice.

    A server is its address: host (case, IPv6 brackets and spelling aside) and port, or a unix
    socket's path; not the database, scheme, login or query, which one server answers for alike. Each
    listing would count that server's one vote again toward the quorum: with `[A, A + "/1", B]`, A
    alone is 2 of 3. `localhost`, 127.0.0.1 and ::1 (and 0.0.0.0, ::) count as one host: a Redis
    server binds both loopbacks by default. Other aliases (a DNS name and its address, a TLS and a
    plaintext port of one server, its unix socket and its TCP port) cannot be told apart without
    asking it, and are not caught.
    """
    if isinstance(masters, str) or not masters:
        raise ConfigurationError("masters must be a non-empty list of Redis URLs, e.g. ['redis://h1:6379']")
    seen: dict[tuple[str, object], int] = {}
    for index, url in enumerate(masters):
        if not isinstance(url, str):
            raise ConfigurationError(
                f"masters[{index}] must be a Redis URL as a str, got {type(url).__name__}: "
                "e.g. 'redis://h1:6379' (decode bytes first)"
            )
        server = _server(url)
        if server is None:  # not readable as a URL: the master's own parser says what is wrong
            continue
        first = seen.setdefault(server, index)
        if first != index:
            where = _server_text(masters[first], server)
            raise ConfigurationError(
                f"masters[{first}] and masters[{index}] name the same Redis server ({where}): whatever "
                "their database, scheme or login, that one server would count twice toward the quorum "
                "and could grant a lock alone; list each server once (Redlock needs independent masters)"
            )


# Addresses that reach this host's loopback server: a Redis server binds 127.0.0.1 and ::1 by default,
# and connecting to the unspecified address reaches whatever listens on this host.
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0", "::"})  # noqa: S104 - compared, not bound


def _server(url: str) -> tuple[str, object] | None:
    """The server `url` reaches: (host, port) or ("unix", path); None if it cannot be read as a URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme == "unix":
        return ("unix", posixpath.normpath(parts.path)) if parts.path else None
    if parts.scheme not in ("redis", "rediss"):  # not a Redis URL: the master's own parser says so
        return None
    host = (parts.hostname or "localhost").rstrip(".")  # lower case, without the IPv6 brackets
    try:
        address = ipaddress.ip_address(host)  # a scope (%eth0) is kept: it may be another link
    except ValueError:
        pass  # a name: compared as written (resolving it here would make construction wait on DNS)
    else:
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        host = str(mapped or address)  # one spelling of each address (::0:1 is ::1)
    if host in _LOOPBACK:
        host = "localhost"
    return (host, port or 6379)


def _server_text(url: str, server: tuple[str, object]) -> str:
    """The server as `url` spells it, for a message: its host and port, or its socket; never its login."""
    if server[0] == "unix":
        return f"unix socket {server[1]}"
    host = urlsplit(url).hostname or "localhost"
    return f"[{host}]:{server[1]}" if ":" in host else f"{host}:{server[1]}"


def check_tokens(tokens: object) -> None:
    """Refuse a `tokens` that is neither None nor a `TokenSource`, before any acquire draws from it."""
    if isinstance(tokens, type):  # the class has the methods too, unbound: every draw would fail
        raise ConfigurationError(
            f"tokens must be a TokenSource instance, got the class {tokens.__name__}: build one, "
            f"e.g. {tokens.__name__}(...), or use lockclient.open_token_source(url)"
        )
    if tokens is not None and not isinstance(tokens, TokenSource):
        raise ConfigurationError(
            f"tokens must be a TokenSource (async next_token, upper_bound and aclose) or None, got "
            f"{type(tokens).__name__}: e.g. lockclient.open_token_source('sqlite:///tokens.db')"
        )


def check_resource(resource: object) -> str:
    """`resource` if it is a non-empty `str` every master and source can hold; else `ConfigurationError`,
    before anything is drawn or sent (an `int` or `bytes` name would otherwise get a token, or a key, of
    its own; a name with no UTF-8 form, or megabytes long, got a token and then failed at a master)."""
    if not isinstance(resource, str) or not resource:
        raise ConfigurationError(
            f"resource must be a non-empty string, got {resource!r} ({type(resource).__name__}): "
            "name the lock with a str, e.g. 'invoices'"
        )
    try:
        size = len(resource.encode("utf-8"))
    except UnicodeEncodeError:
        raise ConfigurationError(
            "resource must be valid Unicode text (it holds a lone surrogate, which has no UTF-8 form): "
            "decode the name with errors='strict' where it came from"
        ) from None
    if size > MAX_RESOURCE_BYTES:
        raise ConfigurationError(
            f"resource must be at most {MAX_RESOURCE_BYTES} bytes in UTF-8, got {size} "
            f"(starting {resource[:32]!r}): name the lock, not its data; hash a long name if you must"
        )
    return resource


def is_number(value: object) -> TypeGuard[float]:
    """Whether `value` is a real number and not a bool: `True` is 1 to Python, but never a duration,
    a factor or a count anyone meant; a str ("10") is a value read from text and not yet converted."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def require_positive(name: str, value: object, fix: str) -> None:
    if not (is_number(value) and math.isfinite(value) and value > 0):
        raise ConfigurationError(f"{name} must be a finite number > 0, got {value!r}: {fix}")


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How a blocking acquire waits between attempts (Redlock steps 4 and 9), and when it gives up.

    attempts: attempts per acquire, None for as many as the timeout allows.
    delay, jitter: after a split vote (nobody has a quorum) wait a random
        `delay + uniform(0, jitter)` seconds, so contenders desynchronise.
        After a failed renewal, or while the masters are unreachable, the
        pause doubles from `delay` each time, up to `max_delay` (plus jitter).
    poll: when another owner holds the lock, wait for its release message,
        but at most this long (the fallback if the message is lost or the
        holder died and its key expires instead).
    unreachable: how long a blocking acquire keeps trying while a majority of
        masters does not answer (down, refused, reset, timed out) before it
        raises `QuorumUnavailable`: an outage is not contention, and waiting
        on it until `timeout` (or forever) would hide it. 0 gives up at once.
    """

    attempts: int | None = None
    delay: float = 0.05
    jitter: float = 0.15
    max_delay: float = 1.0
    poll: float = 1.0
    unreachable: float = DEFAULT_UNREACHABLE

    def __post_init__(self) -> None:
        attempts: object = self.attempts  # an int, not a bool or a float: 1.5 attempts mean nothing
        if attempts is not None and (
            isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
        ):
            raise ConfigurationError(
                f"RetryPolicy.attempts must be an int >= 1 or None, got {self.attempts!r}: "
                "use 1 to try once, None to retry until the timeout"
            )
        for name in ("delay", "jitter", "max_delay", "unreachable"):
            value = getattr(self, name)
            if not (is_number(value) and math.isfinite(value) and value >= 0):
                raise ConfigurationError(f"RetryPolicy.{name} must be a finite number >= 0, got {value!r}")
        require_positive(
            "RetryPolicy.poll", self.poll, "give the longest wait without a release message, e.g. 1.0"
        )

    def backoff(self, streak: int = 0) -> float:
        """A random pause: after a split vote (`streak` 0), or the `streak`-th failure in a row."""
        return min(self.delay * 2.0 ** min(streak, 30), self.max_delay) + random.random() * self.jitter


DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True, kw_only=True, slots=True)
class RedlockSettings:
    """Everything a `Redlock` is tuned by except its masters, clock and token source; checked when built."""

    ttl: float = DEFAULT_TTL
    node_timeout: float = DEFAULT_NODE_TIMEOUT
    retry: RetryPolicy = DEFAULT_RETRY
    drift_factor: float = DEFAULT_DRIFT_FACTOR
    max_extensions: int = DEFAULT_MAX_EXTENSIONS
    watchdog_fraction: float = DEFAULT_WATCHDOG_FRACTION
    reentrant: bool = False
    key_prefix: str = DEFAULT_KEY_PREFIX

    def __post_init__(self) -> None:
        require_positive("node_timeout", self.node_timeout, "a few tens of ms, e.g. 0.05")
        check_ttl(self.ttl, self.node_timeout)
        retry: object = self.retry
        if not isinstance(retry, RetryPolicy):
            raise ConfigurationError(
                f"retry must be a RetryPolicy, got {retry!r}: e.g. RetryPolicy(attempts=1) to try once, "
                "or leave it out for the default"
            )
        # Step 3: validity = ttl - elapsed - (ttl * drift_factor + 2 ms): at 1 or more nothing is left,
        # every attempt is refused (and draws a token) however fast the masters answer.
        drift_factor: object = self.drift_factor
        if not (is_number(drift_factor) and 0 <= drift_factor < 1):
            raise ConfigurationError(
                f"drift_factor must be a number >= 0 and < 1, got {drift_factor!r}: it is the share of "
                "the ttl set aside for clock drift, and 1 or more leaves no validity; the paper uses 0.01"
            )
        max_extensions: object = self.max_extensions
        if isinstance(max_extensions, bool) or not isinstance(max_extensions, int) or max_extensions < 0:
            raise ConfigurationError(
                f"max_extensions must be an int >= 0, got {max_extensions!r}: 0 forbids extend(); "
                "a long job keeps its lease with auto_extend=True"
            )
        fraction: object = self.watchdog_fraction
        if not (is_number(fraction) and 0 < fraction < 1):
            raise ConfigurationError(
                f"watchdog_fraction must be a number in (0, 1), got {fraction!r}: try 1/3"
            )
        reentrant: object = self.reentrant
        if not isinstance(reentrant, bool):
            raise ConfigurationError(f"reentrant must be True or False, got {reentrant!r}")
        key_prefix: object = self.key_prefix
        if not isinstance(key_prefix, str):
            raise ConfigurationError(
                f"key_prefix must be a str, got {key_prefix!r}: e.g. 'myapp:lock:' "
                f"(the default is {DEFAULT_KEY_PREFIX!r})"
            )
        try:
            key_prefix.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigurationError(
                "key_prefix must be valid Unicode text (it holds a lone surrogate, which has no UTF-8 "
                "form): decode it with errors='strict' where it came from"
            ) from None


CertReqs = Literal["required", "optional", "none"]
CERT_REQS: tuple[CertReqs, ...] = get_args(CertReqs)


@dataclass(frozen=True, kw_only=True, slots=True)
class TLSSettings:
    """How `rediss://` masters are reached: redis-py's `ssl_*` settings, under the same names.

    The same names work as query parameters of a master's URL, which win over
    these for that master. Files are PEM. Nothing here turns TLS on: the
    scheme does, and a Redlock given TLS settings refuses a plaintext master.

    ssl_ca_certs: the CAs that may sign a master's certificate (only these);
        None trusts the system's store.
    ssl_certfile, ssl_keyfile: the client certificate and its key, for
        masters that require one (`tls-auth-clients yes`); the key may sit in
        the certificate file.
    ssl_cert_reqs: "required" (the default) verifies the master's
        certificate; "optional" the same, as a client; "none" accepts any
        certificate, which gives encryption without knowing who answers.
    ssl_check_hostname: the certificate must name the host of the URL;
        None (the default) checks unless ssl_cert_reqs is "none".
    """

    ssl_ca_certs: str | os.PathLike[str] | None = None
    ssl_certfile: str | os.PathLike[str] | None = None
    ssl_keyfile: str | os.PathLike[str] | None = None
    ssl_cert_reqs: CertReqs = "required"
    ssl_check_hostname: bool | None = None

    def __post_init__(self) -> None:
        if self.ssl_cert_reqs not in CERT_REQS:
            raise ConfigurationError(
                f"ssl_cert_reqs must be one of {', '.join(CERT_REQS)}, got {self.ssl_cert_reqs!r}: "
                "'required' verifies the master's certificate"
            )
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ConfigurationError(
                "ssl_keyfile is given without ssl_certfile: the key belongs to a client certificate, "
                "give both (or neither)"
            )
        if self.ssl_check_hostname and self.ssl_cert_reqs == "none":
            raise ConfigurationError(
                "ssl_check_hostname needs a verified certificate, but ssl_cert_reqs is 'none': "
                "use ssl_cert_reqs='required' (and ssl_ca_certs), or drop ssl_check_hostname"
            )

    @property
    def checks_hostname(self) -> bool:
        """Whether the master's certificate must name the host it was reached by."""
        if self.ssl_check_hostname is None:
            return self.ssl_cert_reqs != "none"
        return self.ssl_check_hostname
