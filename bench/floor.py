"""The floor under the scaling goal: two round trips to N masters with nothing else.

An acquire+release is two round trips to every master. This yardstick does
exactly that with blocking sockets and PING, no library and no event loop,
so its p50 at N=7 over N=1 is what the machine itself charges for more
masters (each redis-server must be scheduled to answer; on a 2-core machine
seven servers share the cores). fencegate's own ratio cannot be better than
the ratio (fixed client cost + floor at N=7) / (fixed client cost + floor at N=1).
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from bench.runner import Op

PING = b"*1\r\n$4\r\nPING\r\n"
PONG = b"+PONG\r\n"


class RawFanOut:
    """Two blocking round trips of PING to every master, one connection each."""

    def __init__(self, urls: list[str]) -> None:
        self._socks = []
        for url in urls:
            parts = urlsplit(url)
            sock = socket.create_connection((parts.hostname or "localhost", parts.port or 6379))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks.append(sock)

    async def __call__(self) -> None:
        for _ in range(2):  # acquire, then release
            for sock in self._socks:
                sock.sendall(PING)
            for sock in self._socks:
                reply = sock.recv(len(PONG))
                assert reply == PONG, f"expected PONG, got {reply!r}"

    async def aclose(self) -> None:
        for sock in self._socks:
            sock.close()


async def raw_fan_out(urls: list[str]) -> Op:
    return RawFanOut(urls)
