"""How a request or a connection to a master can fail, beyond Python's own exceptions and `TLSError`.

Python's classes are used where they mean the same thing (`TimeoutError`,
`ConnectionRefusedError`, `ConnectionResetError`, `ConnectionAbortedError`);
these add what it has no class for. A failed TLS handshake is lockclient's
own `TLSError`, explained by `lockclient.tls.explain` as for every other
server. `lockclient.transport.fanout` lists them all, with what each means
for a master.
"""

from __future__ import annotations

__all__ = ["AuthenticationError", "ConnectTimeout"]


class AuthenticationError(ConnectionError):
    """The master refused the URL's login (AUTH) or database (SELECT)."""


class ConnectTimeout(ConnectionError):
    """A connection (with its TLS handshake and login) did not open within its timeout."""
