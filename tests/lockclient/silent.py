"""A stand-in for a server that accepts connections: `silent`, it holds them open and never answers
(a server that accepts while it starts up); otherwise it closes them at once (a server that is down)."""

from __future__ import annotations

import asyncio


class Listener:
    """Counts the connections it accepted and the ones that ended (the client gave up, or it closed)."""

    def __init__(self, *, silent: bool = True) -> None:
        self.silent = silent
        self.accepted = 0
        self.closed = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while self.silent and await reader.read(4096):  # the handshake arrives; nothing goes back
                pass
        except ConnectionError:
            pass
        finally:
            self.closed += 1
            writer.close()
