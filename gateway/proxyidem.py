"""`Idempotency-Key` in front of a conditional store: one application, one answer for every retry.

The record is claimed by the fenced unit in the gateway's database, in the
fenced transaction, before anything is sent to the store (a claim is one
`INSERT ... ON CONFLICT DO NOTHING`: of N identical retries through any
replicas exactly one claims, the others meet its row). The claimant's write
carries the request's id (`request_id`, derived from the record: client,
key and the request's digest) as the object's metadata; the store's answer
then finishes the record (`storage.pending`). A retry that meets the record:

- finished: answers its outcome (201/200, or the delete's 404);
- released (the store refused the first attempt, nothing applied): runs the
  request afresh, and meets the same refusal (the store's tokens only rise);
- under way: waits for the claimant's answer, at most `window` seconds (as
  long as the claimant's sends can take); past that, or once the claimant
  reported no answer (`UNKNOWN`), the retry decides at the store itself
  (`ConditionalStore.settle`): a version carrying the request's id means
  the first attempt landed; a stored token below the request's means the
  first attempt has not landed and can no longer land over what it was
  conditional on unless that version is still current, so the retry sends
  the same conditional write (the store lets one of the two through); a
  stored token equal to the request's without its id may be a later write
  of the same lease, never to be overwritten by a retry: 503
  `upstream_outcome_unknown`, the record left for a later retry.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.errors import Unavailable, UpstreamFailed, UpstreamTimeout
from storage import pending
from storage.errors import ObjectNotFound, ResourceMismatch, StaleToken
from storage.protocols import Caller, FencedRequest, ObjectMeta
from storage.records import GONE_VERSION

POLL = 0.02  # seconds between two reads of a record whose claimant is still writing
CONTENDED = "upstream_contended"

Write = Callable[[], Awaitable[ObjectMeta]]


def request_id(caller: Caller) -> str:
    """The id a write sent under an Idempotency-Key carries at the store: the same for every retry."""
    assert caller.idempotency_key is not None
    seed = "\0".join((caller.client, caller.idempotency_key, caller.request_digest))
    return hashlib.sha256(seed.encode()).hexdigest()[:32]


class ProxyRecords:
    """The records' life around the store's write (module docstring)."""

    def __init__(self, engine: AsyncEngine, *, window: float) -> None:
        self._engine = engine
        self.window = window

    async def record(self, request: FencedRequest, write: Write) -> ObjectMeta:
        """Run `write` (the claimant's, or a retry's at the store) and record what the store said;
        the answer is the record's, so every replica finishing one record answers alike."""
        caller = request.caller
        try:
            meta = await write()
        except ObjectNotFound:
            await pending.finish(self._engine, caller, version=GONE_VERSION)
            raise
        except (StaleToken, ResourceMismatch):
            await pending.release(self._engine, caller)
            raise
        except Unavailable as exc:
            if exc.code == CONTENDED:
                await pending.release(self._engine, caller)
            else:
                await pending.unknown(self._engine, caller)
            raise
        except (UpstreamTimeout, UpstreamFailed):
            await pending.unknown(self._engine, caller)
            raise
        await pending.finish(self._engine, caller, version=pending.APPLIED, created=meta.created)
        found = await pending.state(self._engine, caller)
        created = meta.created if found is None else found[1]
        return dataclasses.replace(meta, created=created)

    async def replayed(
        self, request: FencedRequest, first: ObjectMeta, *, afresh: Write, settle: Write
    ) -> ObjectMeta:
        """The answer to a retry that met the record `first` (the fenced unit's replay)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.window
        while True:
            found = await pending.state(self._engine, request.caller)
            if found is None:
                return await afresh()  # released: nothing was applied, the request runs again
            version, created = found
            if version == pending.APPLIED:
                return dataclasses.replace(first, version=None, created=created)
            if version == GONE_VERSION:
                raise ObjectNotFound(f"no object under key {request.key!r} upstream", key=request.key,
                                     audited=True)  # fmt: skip
            if version == pending.UNKNOWN or loop.time() >= deadline:
                return await self.record(request, settle)
            await asyncio.sleep(POLL)
