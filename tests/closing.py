"""`async with closing(a, b):` the clients a test opened, closed in order however the test ends."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Protocol


class Closeable(Protocol):
    def aclose(self) -> Awaitable[object]: ...


@contextlib.asynccontextmanager
async def closing(*clients: Closeable) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for client in clients:
            await client.aclose()
