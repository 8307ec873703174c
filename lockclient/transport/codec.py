"""RESP2 both ways, and nothing else: commands encoded and replies parsed by hiredis, in C.

No sockets here. A `Command` is encoded once and may be written to every
master of a fan-out; `convert` reads its reply into the value its caller
wants (a bool for Redlock's three commands). An error reply is a
`ServerError`, handed to the request it answers, never raised by the parser.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import hiredis

__all__ = ["Arg", "Command", "Convert", "ProtocolError", "Script", "ServerError", "pack", "reader"]

T = TypeVar("T")

Arg = str | bytes | int
# How a reply (bytes, int, None, or a list of those, as hiredis parses it) becomes the caller's value.
Convert = Callable[[object], T]

ProtocolError = hiredis.ProtocolError  # the bytes read are not RESP: the connection cannot be trusted


class ServerError(Exception):
    """An error reply from Redis (NOSCRIPT, WRONGTYPE, NOAUTH, WRONGPASS, ...)."""


def pack(*args: Arg) -> bytes:
    """One command in RESP."""
    return hiredis.pack_command(args)  # type: ignore[no-any-return, arg-type]


def reader() -> hiredis.Reader:
    """A reply parser for one connection: error replies come out as `ServerError` values."""
    return hiredis.Reader(replyError=ServerError)


class Script:
    """A Lua script sent by SHA1; its source is sent only after a NOSCRIPT reply."""

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA1

    def evalsha(self, key: str, *args: Arg) -> bytes:
        return pack("EVALSHA", self.sha, 1, key, *args)

    def eval(self, key: str, *args: Arg) -> bytes:
        return pack("EVAL", self.source, 1, key, *args)


@dataclass(frozen=True, slots=True)
class Command(Generic[T]):
    """One request as written, encoded once, and how to read its reply."""

    payload: bytes
    convert: Convert[T]
    fallback: bytes | None = None  # a script's EVAL, sent after a NOSCRIPT reply to its EVALSHA
