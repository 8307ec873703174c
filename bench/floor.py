"""The floor under the scaling goal: two round trips to N masters with nothing else.

An acquire+release is two round trips to every master. This yardstick does
exactly that with blocking sockets and PING, no library and no event loop,
so its p50 at N=7 over N=1 is what the machine itself charges for more
masters (each redis-server must be scheduled to answer; on a 2-core machine
seven servers share the cores). Waiting for every master is the floor of a
client that does; waiting for the first quorum is fencegate's own floor.
"""

from __future__ import annotations

import selectors
import socket
from urllib.parse import urlsplit

from bench.runner import Op

PING = b"*1\r\n$4\r\nPING\r\n"
PONG = b"+PONG\r\n"


class RawFanOut:
    """Two blocking round trips of PING to every master, one connection each.

    With `quorum`, a round trip ends once a majority of the masters has
    answered it, as fencegate's fan-out does; the slower replies are read
    during the next one (a connection's replies come in order).
    """

    def __init__(self, urls: list[str], *, quorum: bool = False) -> None:
        self._socks = []
        for url in urls:
            parts = urlsplit(url)
            sock = socket.create_connection((parts.hostname or "localhost", parts.port or 6379))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks.append(sock)
        self._need = len(urls) // 2 + 1 if quorum else len(urls)
        self._owed = dict.fromkeys(self._socks, 0)  # PONGs sent for and not read yet, per connection
        self._selector = selectors.DefaultSelector()
        for sock in self._socks:
            self._selector.register(sock, selectors.EVENT_READ)

    async def __call__(self) -> None:
        for _ in range(2):  # acquire, then release
            for sock in self._socks:
                sock.sendall(PING)
                self._owed[sock] += 1
            answered = 0
            while answered < self._need:
                for key, _ in self._selector.select():
                    answered += self._read(key.fileobj)  # type: ignore[arg-type]

    def _read(self, sock: socket.socket) -> int:
        """Read what `sock` has; 1 if that answered this round trip (its backlog is now clear)."""
        data = sock.recv(len(PONG) * self._owed[sock])
        count, rest = divmod(len(data), len(PONG))
        if rest or data != PONG * count:
            raise RuntimeError(f"expected PONGs, got {data!r}")  # a short read of loopback PONGs: never seen
        self._owed[sock] -= count
        return 1 if count and self._owed[sock] == 0 else 0

    async def aclose(self) -> None:
        self._selector.close()
        for sock in self._socks:
            sock.close()


async def raw_fan_out(urls: list[str]) -> Op:
    return RawFanOut(urls)


async def raw_quorum_fan_out(urls: list[str]) -> Op:
    return RawFanOut(urls, quorum=True)
