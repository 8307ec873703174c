"""THE fenced write: one request in, inside an open transaction; one outcome out.

Every engine and mode runs this one algorithm: the per-request store on
SQLAlchemy (`sql.py`, SQLite and PostgreSQL), the SQLite group-commit writer
on stdlib sqlite3 (`sqlite/batch_writer.py`) and the upstream proxy (`gateway/upstream.py`,
`objects=False`) and the PostgreSQL group-commit writer
(`postgresql/group_commit.py`). The
drivers differ only in how a named statement runs: `apply` is a coroutine
over a `Tx`, awaited on an async connection, run to completion at once on a
synchronous one (`run_now`: its statements never suspend), or stepped in
lockstep with the other requests of a batch, each step's statements sent
together.

The order is the safety argument:

1. A write with an `Idempotency-Key` whose record exists is answered from
   it (`records.replay`), before any check: the write already happened.
2. and 3. in one statement, the fence upsert: it raises the mark of the
   request's resource only if the key is unbound or bound to that resource
   (a `NOT EXISTS` guard in the same statement, so a request naming another
   resource moves no mark of either), and only if the token is not below
   it; its row says whether the key is bound yet. No row back is a refusal
   with nothing written: `BoundElsewhere` if the key belongs to another
   resource, else `BelowMark` (two reads tell which, on this rare path).
4. A key without a binding is bound to the request's resource, claimed
   with `ON CONFLICT DO NOTHING`, whatever the method: a fenced read or
   delete, even of a missing key, binds it too. A request that read "no
   binding" may otherwise meet, on PostgreSQL, an object another replica
   created under another resource since (each statement sees what
   committed before it began), and read or delete it; and a fenced read of
   a key not yet written protects the read-modify-write that follows only
   if the write must name the same resource. Then the change; its audit
   entry; the idempotency record, claimed the same way.

Refusals of steps 1-3 wrote nothing (with the fence off, the benchmark's
yardstick, steps 2 and 3 are a plain read of the binding). A claim that
finds another transaction's row (PostgreSQL: two replicas racing for one
new key, or two retries of one write) returns `Retry`: the driver rolls
back and runs the request again, which then meets that row in step 1 or 2.
So does a retried delete that finds no object because its twin deleted it
and recorded the outcome while this one waited at the fence (its own
record's claim meets the twin's). A serial writer (SQLite) never gets
`Retry`: its reads in steps 1 and 2 already see every earlier write.
`ObjectNotFound` from a fenced read or delete of a missing key is the one
refusal that commits: the raised mark and the audit entry stand, and a
delete's 404 is recorded under its `Idempotency-Key` (version
`GONE_VERSION`), so its retry is answered 404 again even once the key was
written since.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from storage.errors import (
    BelowMark,
    BoundElsewhere,
    IdempotencyKeyConflict,
    MalformedRow,
    ObjectNotFound,
    StorageError,
)
from storage.protocols import FencedRequest, ObjectData, ObjectMeta
from storage.records import (
    ACCEPTED,
    GONE_VERSION,
    NOT_FOUND,
    PENDING,
    PENDING_STATUS,
    REPLAYED,
    audit_params,
    idempotency_params,
    replay,
    status_of,
    unfinished,
)
from storage.statements import META_COLUMNS

__all__ = [
    "FENCED",
    "FencedRequest",
    "Outcome",
    "Policy",
    "Retry",
    "Tx",
    "apply",
    "digest_of",
    "run_now",
    "stale_token",
]

Row = Mapping[str, Any]
Outcome = ObjectMeta | ObjectData | StorageError


class Tx(Protocol):
    """An open transaction as the unit sees it: named statements of `Statements`, one row back."""

    def row(self, statement: str, params: Mapping[str, Any]) -> Awaitable[Row | None]:
        """Run one statement; its first row, or None. It may suspend (a driver may pipeline it)."""
        ...

    def audit(self, params: Mapping[str, Any]) -> Awaitable[None]:
        """Insert an audit entry in this transaction (a batch may defer it to just before its commit)."""
        ...


@dataclass(frozen=True, slots=True)
class Policy:
    """How the unit runs.

    `objects=False` in proxy mode: the bytes live upstream, the unit keeps
    the mark, the binding and the audit trail. `fence=False` exists only for
    the benchmark's yardstick (everything but the fence, to measure what the
    fence costs); nothing in the product builds it.
    """

    fence: bool = True
    objects: bool = True


FENCED = Policy()


class Retry(StorageError):
    """A concurrent transaction committed the row this one claimed: roll back and run the request again."""


def digest_of(data: bytes) -> str:
    """The content digest used as the ETag."""
    return hashlib.sha256(data).hexdigest()


def stale_token(resource: str, token: int, highest: int) -> BelowMark:
    """The refusal of `token` by the mark `highest`."""
    return BelowMark(
        f"token {token} is below the mark {highest} of resource {resource!r}: a newer lease has "
        "written; take the lock again to get a fresh token",
        resource=resource,
        token=token,
        highest=highest,
    )


def resource_mismatch(key: str, resource: str, bound: str) -> BoundElsewhere:
    """The refusal of a request that names `resource` for a key that belongs to `bound`."""
    return BoundElsewhere(
        f"key {key!r} belongs to resource {bound!r}, and this request named {resource!r}: a key is fenced "
        f"by the mark of its own resource only; send Fencing-Resource: {bound} with a token of that "
        "resource's lock (a key never moves to another resource, not even after a delete)",
        key=key,
        resource=resource,
        bound=bound,
    )


def run_now(step: Coroutine[Any, Any, Outcome]) -> Outcome:
    """Run `apply` on a synchronous `Tx` to its end at once; its statements never suspend."""
    try:
        step.send(None)
    except StopIteration as done:
        outcome: Outcome = done.value
        return outcome
    step.close()
    raise RuntimeError("the fenced unit suspended on a synchronous transaction")


async def apply(tx: Tx, request: FencedRequest, *, now: datetime, policy: Policy = FENCED) -> Outcome:
    """Decide and apply `request` in `tx`'s open transaction; see the module docstring for the order."""
    caller = request.caller
    claim = None  # the idempotency record's key, for a write that has one
    if request.method != "GET" and caller.idempotency_key is not None:
        claim = {"client": caller.client, "idempotency_key": caller.idempotency_key}
        record = await tx.row("idempotency_select", claim)
        if record is not None:
            return await _replayed(tx, request, record, now)
    if policy.fence:
        mark = {"key": request.key, "resource": request.resource, "token": request.token, "updated_at": now}
        passed = await tx.row("fence_upsert", mark)
        if passed is None:
            return await _refusal(tx, request)
        bound = passed["bound"]
    else:
        bound = await _binding(tx, request.key)
        if bound is not None and bound != request.resource:
            return resource_mismatch(request.key, request.resource, bound)
    if bound is None:
        binding = {"key": request.key, "resource": request.resource, "created_at": now}
        if await tx.row("binding_insert", binding) is None:
            return Retry(f"key {request.key!r} was bound by a concurrent request")
    found = await (_change(tx, request, now) if policy.objects else _passed(request, created=bound is None))
    if found is None:
        await _audit(tx, request, now, status=404, outcome=NOT_FOUND)
        if claim is not None:
            # The 404 is this delete's outcome: recorded, so a retry replays it rather than deleting an
            # object written since. A concurrent retry that deleted the object and recorded its outcome
            # while this one waited at the fence holds the record: answer its outcome, not a 404.
            gone = ObjectMeta(
                key=request.key, resource=request.resource, token=request.token,
                version=GONE_VERSION, size=0, digest=None,
            )  # fmt: skip
            if await tx.row("idempotency_insert", idempotency_params(caller, gone, now=now)) is None:
                return Retry(f"Idempotency-Key {caller.idempotency_key!r} was recorded by a concurrent retry")
        return ObjectNotFound(f"no object under key {request.key!r}", key=request.key, audited=True)
    meta = found.meta if isinstance(found, ObjectData) else found
    await _audit(tx, request, now, status=status_of(request.method, meta), outcome=ACCEPTED)
    if claim is None:
        return found
    if await tx.row("idempotency_insert", idempotency_params(caller, meta, now=now)) is None:
        return Retry(f"Idempotency-Key {caller.idempotency_key!r} was recorded by a concurrent retry")
    return found


async def _refusal(tx: Tx, request: FencedRequest) -> StorageError:
    """Why the fence upsert changed nothing: the key belongs to another resource, or the mark is higher."""
    bound = await _binding(tx, request.key)
    if bound is not None and bound != request.resource:
        return resource_mismatch(request.key, request.resource, bound)
    highest = await tx.row("mark_select", {"resource": request.resource})
    assert highest is not None  # a mark the upsert would not raise
    return stale_token(request.resource, request.token, highest["token"])


async def _binding(tx: Tx, key: str) -> str | None:
    """The resource `key` belongs to, if any."""
    row = await tx.row("binding_select", {"key": key})
    return None if row is None else str(row["resource"])


async def _replayed(tx: Tx, request: FencedRequest, record: Row, now: datetime) -> Outcome:
    try:
        meta = replay(request.caller, record)
    except IdempotencyKeyConflict as exc:
        return exc
    if meta.version == GONE_VERSION:
        await _audit(tx, request, now, status=404, outcome=REPLAYED, mark=False)
        return ObjectNotFound(f"no object under key {request.key!r}", key=request.key, audited=True)
    if unfinished(meta):  # the outcome is the claimant's, not known yet: `gateway.proxyidem` audits it
        await _audit(tx, request, now, status=PENDING_STATUS, outcome=PENDING, mark=False)
        return meta
    await _audit(tx, request, now, status=status_of(request.method, meta), outcome=REPLAYED, mark=False)
    return meta


async def _change(tx: Tx, request: FencedRequest, now: datetime) -> ObjectMeta | ObjectData | None:
    """The object's change (or read); None when a read or delete finds no object."""
    key = request.key
    if request.method == "PUT":
        data = request.data
        params = {
            "key": key,
            "data": data,
            "size": len(data),
            "digest": digest_of(data),
            "token": request.token,
            "resource": request.resource,
            "content_type": request.content_type,
            "updated_at": now,
        }
        row = await tx.row("object_upsert", params)
        assert row is not None  # an upsert always returns its row
        return ObjectMeta(**{name: row[name] for name in META_COLUMNS}, created=row["version"] == 1)
    if request.method == "DELETE":
        row = await tx.row("object_delete", {"key": key})
        if row is None:
            return None
        return ObjectMeta(
            key=key,
            resource=request.resource,
            token=request.token,
            version=row["version"],
            size=row["size"],
            digest=row["digest"],
        )
    row = await tx.row("object_select", {"key": key})
    return None if row is None else object_data(row)


async def _passed(request: FencedRequest, *, created: bool) -> ObjectMeta:
    """Proxy mode: the fence passed and the key is bound; the upstream holds the bytes."""
    data = request.data
    return ObjectMeta(
        key=request.key,
        resource=request.resource,
        token=request.token,
        version=None,
        size=len(data),
        digest=digest_of(data) if request.method == "PUT" else None,
        created=created and request.method == "PUT",
    )


# What each column of an object's row holds as fencegate writes it; SQLite keeps any value in any column.
_OBJECT_KINDS: dict[str, type] = {
    "key": str,
    "resource": str,
    "digest": str,
    "content_type": str,
    "data": bytes,
}
_OBJECT_COUNTS = ("token", "version", "size")  # integers, never negative


def object_data(row: Row) -> ObjectData:
    """An object as `Statements.object_select` returns it."""
    meta = ObjectMeta(**{name: row[name] for name in META_COLUMNS})
    return ObjectData(meta=meta, data=row["data"], content_type=row["content_type"])


def read_object(key: str, row: Row | None) -> ObjectData:
    """A plain read's answer from `Statements.object_select`'s row, or none: every reader ends here."""
    if row is None:
        raise ObjectNotFound(f"no object under key {key!r}", key=key)
    _check(row)
    return object_data(row)


def _check(row: Row) -> None:
    """`MalformedRow` if the row was edited to hold what fencegate never writes: answered as is it
    would be a lie, or a header aiohttp drops the connection on."""
    for name in _OBJECT_COUNTS:
        count = row[name]
        if type(count) is not int or count < 0:  # bool is not int here
            raise MalformedRow(f"an object's {name} holds {str(count)[:40]!r}, not a count", column=name)
    for name, kind in _OBJECT_KINDS.items():
        if type(row[name]) is not kind:
            raise MalformedRow(
                f"an object's {name} holds {str(row[name])[:40]!r}, not {kind.__name__}", column=name
            )
    if not (row["content_type"].isascii() and row["content_type"].isprintable()):
        raise MalformedRow("an object's content_type holds what no Content-Type may", column="content_type")


async def _audit(
    tx: Tx, request: FencedRequest, now: datetime, *, status: int, outcome: str, mark: bool = True
) -> None:
    params = audit_params(
        request.caller,
        method=request.method,
        key=request.key,
        resource=request.resource,
        token=request.token,
        mark=request.token if mark else None,
        status=status,
        outcome=outcome,
        now=now,
    )
    await tx.audit(params)
