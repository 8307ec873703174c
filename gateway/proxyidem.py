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

A retry that met a record under way is audited by the fenced unit as
`pending` (202): its answer is not known then. Once it is, it gets an entry
of its own: `replayed` with the first outcome's status, `accepted` when the
retry's own send at the store landed; a refusal is audited as every refusal
is, and a request run afresh audits itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.errors import PreconditionNotMet, Unavailable, UpstreamFailed, UpstreamTimeout
from storage import pending
from storage.errors import BelowMark, BoundElsewhere, ObjectNotFound
from storage.protocols import Caller, FencedRequest, ObjectMeta, Refused
from storage.records import ACCEPTED, GONE_VERSION, REPLAYED, status_of, unfinished

POLL = 0.02  # seconds between two reads of a record whose claimant is still writing
CONTENDED = "upstream_contended"

Write = Callable[[], Awaitable[ObjectMeta]]
Audit = Callable[[Sequence[Refused]], Awaitable[None]]  # appends entries to the audit trail


def request_id(caller: Caller) -> str:
    """The id a write sent under an Idempotency-Key carries at the store: the same for every retry."""
    assert caller.idempotency_key is not None
    seed = "\0".join((caller.client, caller.idempotency_key, caller.request_digest))
    return hashlib.sha256(seed.encode()).hexdigest()[:32]


class ProxyRecords:
    """The records' life around the store's write (module docstring)."""

    def __init__(self, engine: AsyncEngine, *, window: float, audit: Audit) -> None:
        self._engine = engine
        self.window = window
        self._audit = audit

    async def _audited(self, request: FencedRequest, *, status: int, outcome: str) -> None:
        """The audit entry of a retry's answer, known only after the fenced unit audited it pending."""
        entry = Refused(
            at=datetime.now(UTC), client=request.caller.client, method=request.method, key=request.key,
            resource=request.resource, token=request.token, mark=None, status=status, outcome=outcome,
        )  # fmt: skip
        await self._audit([entry])

    async def record(self, request: FencedRequest, write: Write) -> ObjectMeta:
        """Run `write` (the claimant's, or a retry's at the store) and record what the store said;
        the answer is the record's, so every replica finishing one record answers alike."""
        caller = request.caller
        try:
            meta = await write()
        except ObjectNotFound:
            await pending.finish(self._engine, caller, version=GONE_VERSION)
            raise
        except (BelowMark, BoundElsewhere, PreconditionNotMet):
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
        waited = unfinished(first)  # audited `pending`: its answer gets an entry once known
        while True:
            found = await pending.state(self._engine, request.caller)
            if found is None:
                return await afresh()  # released: nothing was applied, the request runs again
            version, created = found
            if version == pending.APPLIED:
                # no ETag: the record does not hold the store's (a GET answers it)
                meta = dataclasses.replace(first, version=None, digest=None, created=created)
                if waited:
                    await self._audited(request, status=status_of(request.method, meta), outcome=REPLAYED)
                return meta
            if version == GONE_VERSION:
                if waited:
                    await self._audited(request, status=404, outcome=REPLAYED)
                raise ObjectNotFound(f"no object under key {request.key!r} upstream", key=request.key,
                                     audited=True)  # fmt: skip
            if version == pending.UNKNOWN or loop.time() >= deadline:
                meta = await self.record(request, settle)
                if waited:
                    outcome = REPLAYED if meta.replayed else ACCEPTED  # a twin's write found, or its own
                    await self._audited(request, status=status_of(request.method, meta), outcome=outcome)
                return meta
            await asyncio.sleep(POLL)
