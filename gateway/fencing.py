"""The gateway's guard around its store: tokens from the future, and the refusals counted.

`Fencer` holds the store and wraps each fenced call to it: first the
token-from-the-future guard (a token above the source's upper bound for the
resource is refused 422, since one such token would fence out every honest
client forever), then the store's call, timed; the fence's own decisions
(binding, mark, replay) live in `storage/fenced.py`. A stale refusal is
checked against the source once more: if the mark itself is above what the
source has ever issued, the source went back (restored from a backup, a
reset counter) and every honest client would be refused; that is answered
503 `token_source_regressed`, logged and counted, not 409.

The bound is cached per resource and the source is asked again only when a
token exceeds it (bounds only grow while the source is healthy), or when a
refusal needs explaining. Refusals of one resource explained at the same time
share one read (a burst of stale writers would otherwise be a burst of reads
of the source): any read of the bound tells a source that went back, and one
that began a moment before the refusal only delays that news to the next
refusal. A token above the bound never joins an earlier read: that read may
predate the token's draw. Each ask has `ASK_DEADLINE` of its own: a source
bounds one read, but not the reads queued behind it (the gateway asks once per
request, so many at once while the source is paused or silent), and a read
cancelled at a deadline may take seconds to wind down; the request does not
wait for that (`bound_within`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway.errors import PreconditionNotSupported, TokenAboveBound, Unavailable
from gateway.metrics import Metrics
from lockclient.errors import LockClientError
from lockclient.protocols import TokenSource
from storage.errors import BelowMark, BoundElsewhere
from storage.models import DEFAULT_CONTENT_TYPE
from storage.protocols import ANONYMOUS, Caller, ObjectData, ObjectMeta, ObjectStore, Precondition

log = logging.getLogger(__name__)

BOUND_CACHE_SIZE = 100_000  # resources whose bound is remembered; the oldest are forgotten first
ASK_DEADLINE = 5.0  # seconds a request waits for the source's bound; then 503 token_source_unavailable

_winding_down: set[asyncio.Task[int]] = set()  # reads given up on, kept referenced until they end


async def bound_within(source: TokenSource, resource: str, deadline: float) -> int:
    """`source.upper_bound(resource)`, or TimeoutError once `deadline` seconds have passed.

    The read is cancelled then, but not waited for: a cancelled PostgreSQL read closes its
    connection gracefully (up to 2 s more on a paused server), a kazoo call keeps its thread."""
    task = asyncio.ensure_future(source.upper_bound(resource))
    try:
        done, _ = await asyncio.wait({task}, timeout=deadline)
    finally:
        if not task.done():
            task.cancel()
            _winding_down.add(task)
            task.add_done_callback(_wound_down)
    if not done:
        raise TimeoutError(f"no answer within {deadline:g} s")
    return task.result()


def _wound_down(task: asyncio.Task[int]) -> None:
    _winding_down.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: its failure was already answered as the deadline


class FutureGuard:
    """Refuses tokens above the source's bound and notices a source that went back."""

    def __init__(self, source: TokenSource | None, *, metrics: Metrics) -> None:
        self._source = source
        self._metrics = metrics
        self._bounds: OrderedDict[str, int] = OrderedDict()
        self._explaining: dict[str, asyncio.Future[int]] = {}  # per resource, the read refusals share

    @property
    def enabled(self) -> bool:
        return self._source is not None

    async def _ask(self, resource: str) -> int:
        assert self._source is not None
        try:
            bound = await bound_within(self._source, resource, ASK_DEADLINE)
        except (LockClientError, OSError, TimeoutError) as exc:
            raise Unavailable(
                f"the token source did not answer for {resource!r} within {ASK_DEADLINE:g} s: {exc!r}; "
                "nothing was written, retry",
                code="token_source_unavailable",
                fields={"resource": resource},
            ) from exc
        self._bounds[resource] = bound
        self._bounds.move_to_end(resource)
        while len(self._bounds) > BOUND_CACHE_SIZE:
            self._bounds.popitem(last=False)
        return bound

    async def _shared_ask(self, resource: str) -> int:
        """`_ask`, joined to a read of `resource` already out for another refusal; a caller that gives
        up does not cancel it for the others."""
        read = self._explaining.get(resource)
        if read is None:
            read = asyncio.ensure_future(self._ask(resource))
            self._explaining[resource] = read
            read.add_done_callback(lambda done: self._explained(resource, done))
        return await asyncio.shield(read)

    def _explained(self, resource: str, read: asyncio.Future[int]) -> None:
        if self._explaining.get(resource) is read:
            del self._explaining[resource]
        if not read.cancelled():
            read.exception()  # retrieved: every caller still waiting got it, and none may be left

    async def admit(self, resource: str, token: int) -> None:
        """422 if `token` is above everything the source has issued for `resource`."""
        if self._source is None or token <= self._bounds.get(resource, 0):
            return
        bound = await self._ask(resource)
        if token > bound:
            self._metrics.future_refusals.inc()
            raise TokenAboveBound(
                f"token {token} is above the highest the token source has issued for {resource!r} ({bound}); "
                "send a token drawn from the gateway's token source",
                fields={"resource": resource, "token": token, "bound": bound},
            )

    async def explain(self, stale: BelowMark) -> None:
        """503 token_source_regressed if the mark that refused `stale` is above the source's bound."""
        if self._source is None:
            return
        bound = await self._shared_ask(stale.resource)
        if stale.highest > bound:
            self._metrics.token_source_regressed.inc()
            log.error(
                "token source regressed: resource=%s mark=%d source_bound=%d token=%d; every client is "
                "refused until the source issues tokens above the mark",
                stale.resource,
                stale.highest,
                bound,
                stale.token,
            )
            raise Unavailable(
                f"the token source's bound {bound} for {stale.resource!r} is below the mark {stale.highest}: "
                "the source went back (restored or reset); move it past the mark, nothing was written",
                code="token_source_regressed",
                fields={"resource": stale.resource, "highest": stale.highest, "bound": bound},
            ) from stale


class Fencer:
    """The store, behind the future-token guard, timed, its refusals counted."""

    def __init__(self, *, store: ObjectStore, guard: FutureGuard, metrics: Metrics) -> None:
        self._store = store
        self._guard = guard
        self._metrics = metrics

    async def put(
        self,
        key: str,
        data: bytes,
        *,
        resource: str,
        token: int,
        caller: Caller = ANONYMOUS,
        content_type: str = DEFAULT_CONTENT_TYPE,
        precondition: Precondition | None = None,
    ) -> ObjectMeta:
        self._check(precondition)
        async with self._guarded(resource, token):
            meta = await self._store.put(
                key,
                data,
                resource=resource,
                token=token,
                caller=caller,
                content_type=content_type,
                precondition=precondition,
            )
        return self._counted(meta)

    async def get(
        self, key: str, *, resource: str, token: int | None, caller: Caller = ANONYMOUS
    ) -> ObjectData:
        if token is None:
            return await self._store.read(key, resource=resource)
        async with self._guarded(resource, token):
            return await self._store.get(key, resource=resource, token=token, caller=caller)

    async def delete(
        self,
        key: str,
        *,
        resource: str,
        token: int,
        caller: Caller = ANONYMOUS,
        precondition: Precondition | None = None,
    ) -> ObjectMeta:
        self._check(precondition)
        async with self._guarded(resource, token):
            meta = await self._store.delete(
                key, resource=resource, token=token, caller=caller, precondition=precondition
            )
        return self._counted(meta)

    def _check(self, precondition: Precondition | None) -> None:
        """501 before anything is asked or written when the store would not check the precondition."""
        if precondition is not None and not self._store.preconditions:
            raise PreconditionNotSupported(
                "If-Match / If-None-Match on a write is honoured in front of an s3:// upstream or a "
                "conditional http(s) upstream only; this store would not check it, so nothing was written: "
                "send the write without it (the fence alone orders this store's writes)"
            )

    @asynccontextmanager
    async def _guarded(self, resource: str, token: int) -> AsyncIterator[None]:
        """Around the store's call, once the guard admitted `token`: timed, a refusal explained, counted."""
        await self._guard.admit(resource, token)
        start = time.perf_counter()
        try:
            yield
        except BelowMark as exc:
            await self._guard.explain(exc)
            self._metrics.stale_refusals.inc()
            raise
        except BoundElsewhere:
            self._metrics.resource_mismatches.inc()
            raise
        finally:
            self._metrics.fence_check_seconds.observe(time.perf_counter() - start)

    def _counted(self, meta: ObjectMeta) -> ObjectMeta:
        if meta.replayed:
            self._metrics.idempotent_replays.inc()
        return meta
