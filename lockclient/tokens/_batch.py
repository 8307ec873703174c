"""Draws waiting at the same moment share one round trip to the source.

A draw queues and waits. While fewer than `in_flight` requests are out, the
queue's head leaves at once as one request for up to `max_batch` draws, in
arrival order; draws that arrive while every slot is busy wait for the next
request. A draw only ever joins a request that has not been sent yet, so its
token comes from a request that left after the draw began: above every token
issued before it, as a token source must be (invariant 5). Alone, a draw is
sent at once and pays no extra wait.

`distinct=True` is for sources where one request gives every draw in it the
same number (a ZooKeeper multi shares one zxid, an etcd transaction one
revision): two draws for one resource then never share a request, the later
one waits for the next, so per resource every token is different.

A failed request fails each of its draws with the same error; a cancelled
draw leaves its request running (its token is wasted: gaps are fine).
`aclose(within=...)` waits that long at most for the requests already sent,
then gives up on them: their draws, and those still queued, fail with the
error it is given (the source closes its client under them).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

__all__ = ["Batcher", "Send"]

# One request for these resources, in order; returns one token per resource, in the same order.
Send = Callable[[Sequence[str]], Awaitable[Sequence[int]]]


class Batcher:
    """Queue draws and send them together; see the module docstring."""

    def __init__(self, send: Send, *, max_batch: int, in_flight: int = 1, distinct: bool = False) -> None:
        if max_batch < 1 or in_flight < 1:
            raise ValueError(f"max_batch and in_flight must be >= 1, got {max_batch} and {in_flight}")
        self._send = send
        self.max_batch = max_batch
        self.in_flight = in_flight
        self.distinct = distinct
        self._queue: deque[tuple[str, asyncio.Future[int]]] = deque()
        self._out = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._abandoned: Callable[[], Exception] | None = None  # set while aclose() gives up on requests

    async def draw(self, resource: str) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append((resource, future))
        self._dispatch()
        return await future

    def _dispatch(self) -> None:
        if self._abandoned is not None:  # closing: nothing new is sent
            return
        while self._out < self.in_flight:
            batch = self._take()
            if not batch:
                return
            self._out += 1
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take(self) -> list[tuple[str, asyncio.Future[int]]]:
        """The next request's draws: the queue's head in arrival order (cancelled ones dropped)."""
        batch: list[tuple[str, asyncio.Future[int]]] = []
        held: list[tuple[str, asyncio.Future[int]]] = []
        seen: set[str] = set()
        while self._queue and len(batch) < self.max_batch:
            resource, future = self._queue.popleft()
            if future.done():
                continue
            if self.distinct and resource in seen:
                held.append((resource, future))  # a later request: it must not share this one's number
                continue
            seen.add(resource)
            batch.append((resource, future))
        self._queue.extendleft(reversed(held))
        return batch

    async def _run(self, batch: list[tuple[str, asyncio.Future[int]]]) -> None:
        try:
            tokens = await self._send([resource for resource, _ in batch])
            if len(tokens) != len(batch):
                raise RuntimeError(f"a request for {len(batch)} draws returned {len(tokens)} tokens")
        except asyncio.CancelledError:
            abandoned = self._abandoned
            for _, future in batch:
                if abandoned is None:
                    future.cancel()
                elif not future.done():
                    future.set_exception(abandoned())
            raise
        except Exception as exc:  # noqa: BLE001 (not swallowed: every draw of the request raises it)
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        else:
            for (_, future), token in zip(batch, tokens, strict=True):
                if not future.done():
                    future.set_result(token)
        finally:
            self._out -= 1
            self._dispatch()

    async def aclose(
        self, *, within: float | None = None, abandoned: Callable[[], Exception] = ConnectionAbortedError
    ) -> None:
        """Wait for the requests already sent (their draws get their answers), `within` seconds at most
        (None: until they end); then cancel them and fail their draws and the queued ones with
        `abandoned()`. The batcher can be used again afterwards."""
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=within)
        late = set(self._tasks)  # those still out, and any sent meanwhile for the queued draws
        if not late:
            return
        self._abandoned = abandoned
        try:
            for task in late:
                task.cancel()
            await asyncio.wait(late)  # unlike awaiting them, never swallows the caller's own cancellation
            queued, self._queue = self._queue, deque()
            for _, future in queued:
                if not future.done():
                    future.set_exception(abandoned())
        finally:
            self._abandoned = None
