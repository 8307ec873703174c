"""A lean RESP2 transport to Redis masters: one pipelined connection per master, hiredis parsing.

Why not redis.asyncio on the hot path: each of its commands checks a
connection out of a pool, takes the connection's lock, runs a task and goes
through several parser layers. Redlock needs three commands and nothing else,
so profiling put most of an acquire+release in that machinery, not in Redis.

One job per module, each importing only those before it:

- `codec`: RESP both ways (hiredis), commands encoded once, scripts by SHA1.
- `endpoint`: a master's URL read into address, login, database and TLS
  settings; the TLS context.
- `errors`: the failures Python has no class for (login, a connect
  timeout); a TLS failure is lockclient's `TLSError`.
- `connection`: a socket (TCP, TLS or unix) and its login, replies matched
  to requests in order; foreign errors translated into those failures.
- `fanout`: one command to N masters, waited for as one batch; the typed
  outcome of each master, `Pending` included.
"""

from lockclient.transport.codec import Command, ServerError, pack
from lockclient.transport.connection import Connection, Reply
from lockclient.transport.endpoint import Endpoint
from lockclient.transport.errors import AuthenticationError, ConnectTimeout
from lockclient.transport.fanout import UNREACHABLE, Batch, Outcome, Pending, current

__all__ = [
    "UNREACHABLE",
    "AuthenticationError",
    "Batch",
    "Command",
    "ConnectTimeout",
    "Connection",
    "Endpoint",
    "Outcome",
    "Pending",
    "Reply",
    "ServerError",
    "current",
    "pack",
]
