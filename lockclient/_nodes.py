"""One Redis master as Redlock uses it: one pipelined connection, and the commands it is sent.

Each master keeps one connection (`lockclient.transport`), reused by every attempt
and every concurrent caller. There is no client-side retry: a retry would hide
a slow node inside the per-node timeout that `fan_out` enforces, and Redlock
already retries whole attempts with a fresh value. A command abandoned at that
timeout drops its connection; the next command opens a new one.

A command is encoded once per fan-out (`Command`) and sent to every master;
each send returns a `Reply`, not a coroutine, so `fan_out` waits on all of
them as one batch, with no task or future per node.
"""

from __future__ import annotations

import functools
from typing import TypeVar

from lockclient.config import TLSSettings
from lockclient.errors import ConfigurationError
from lockclient.transport.codec import Command, Script, pack
from lockclient.transport.connection import Connection, Link, Push, Reply
from lockclient.transport.endpoint import Endpoint, redact

__all__ = ["EXTEND", "PING", "RELEASE", "Master", "extend", "release", "release_channel", "set_nx"]

T = TypeVar("T")

# The Lua scripts Redlock runs on every master. Release and extend must compare the owner's value and
# act in one step on the server: a client-side GET followed by DEL could delete a key that expired and
# was taken by someone else in between. Each one's header names its keys, arguments and reply; they
# are sent with EVALSHA, and as EVAL on NOSCRIPT.

# KEYS[1] lock key / ARGV[1] owner value / ARGV[2] release channel
# returns 1 if the owner's key was deleted (waiters on ARGV[2] are told), 0 if absent or another owner's
RELEASE = """\
-- KEYS[1] lock key / ARGV[1] owner value / ARGV[2] release channel
-- returns 1 if the owner's key was deleted (waiters are told), 0 if absent or another owner's
if redis.call("GET", KEYS[1]) == ARGV[1] then
    redis.call("DEL", KEYS[1])
    redis.call("PUBLISH", ARGV[2], ARGV[1])
    return 1
end
return 0
"""

# KEYS[1] lock key / ARGV[1] owner value / ARGV[2] new time to live in ms
# returns 1 if the owner's key now expires in ARGV[2] ms, 0 if absent or another owner's
EXTEND = """\
-- KEYS[1] lock key / ARGV[1] owner value / ARGV[2] new time to live in ms
-- returns 1 if the owner's key now expires in ARGV[2] ms, 0 if absent or another owner's
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
"""

RELEASE_SCRIPT = Script(RELEASE)
EXTEND_SCRIPT = Script(EXTEND)


def release_channel(key: str) -> str:
    """The pub/sub channel the release script publishes on (channels and keys never collide)."""
    return f"{key}:released"


def endpoint(url: str, tls: TLSSettings | None = None) -> Endpoint:
    """`url` read as a master's endpoint; `ConfigurationError` naming the master and the fix."""
    try:
        return Endpoint.from_url(url, tls=tls)
    except ValueError as exc:
        raise ConfigurationError(f"master {redact(url)!r}: {exc}") from None


def _is_ok(reply: object) -> bool:
    return reply == b"OK"


def _is_pong(reply: object) -> bool:
    return reply == b"PONG"


def _is_one(reply: object) -> bool:
    return reply == 1


PING = Command(pack("PING"), _is_pong)


# An attempt and its undo or release send the same command to every master, and a retry or a
# watchdog often sends it again: encode each once.
@functools.lru_cache(maxsize=16)
def set_nx(key: str, value: str, ttl_ms: int) -> Command[bool]:
    """`SET key value NX PX ttl`: True if the master granted the key."""
    return Command(pack("SET", key, value, "NX", "PX", ttl_ms), _is_ok)


@functools.lru_cache(maxsize=16)
def release(key: str, value: str) -> Command[bool]:
    """Compare-and-delete; True only if the key held `value` and is now gone."""
    channel = release_channel(key)
    return Command(
        RELEASE_SCRIPT.evalsha(key, value, channel), _is_one, RELEASE_SCRIPT.eval(key, value, channel)
    )


@functools.lru_cache(maxsize=16)
def extend(key: str, value: str, ttl_ms: int) -> Command[bool]:
    """Compare-and-pexpire; True only if the key held `value` and now lives `ttl_ms`."""
    return Command(EXTEND_SCRIPT.evalsha(key, value, ttl_ms), _is_one, EXTEND_SCRIPT.eval(key, value, ttl_ms))


class Master(Connection):
    """A Redis master: its command connection, and subscriber connections on demand.

    `url` names it in per-node reasons; messages name it without its password.
    `tls` are the settings of every `rediss://` master (its URL may override
    them); given them, a plaintext URL is refused.

    Once closed it stays closed: a command sent after `aclose()` fails at
    once (`ConnectionAbortedError`) instead of opening a connection that
    nothing would close again.
    """

    def __init__(self, url: str, *, connect_timeout: float, tls: TLSSettings | None = None) -> None:
        where = endpoint(url, tls)
        try:
            super().__init__(where, redact(url), connect_timeout=connect_timeout)
        except ValueError as exc:  # a certificate or key file that cannot be used
            raise ConfigurationError(f"master {redact(url)!r}: {exc}") from None
        self.url = url
        self.closed = False

    def send(self, command: Command[T]) -> Reply[T]:
        if not self.closed:
            return super().send(command)
        reply: Reply[T] = Reply(command.convert, command.fallback)
        reply.resolve(ConnectionAbortedError(f"connection to {self.name} closed by the client"))
        return reply

    async def aclose(self) -> None:
        self.closed = True
        await super().aclose()

    async def subscriber(self, push: Push, *, timeout: float) -> Link:  # noqa: ASYNC109 - a handshake bound
        """A new connection of its own for pub/sub, every message passed to `push`."""
        if self.closed:
            raise ConnectionAbortedError(f"connection to {self.name} closed by the client")
        link = await self.connect(timeout=timeout)
        link.push = push
        return link
