"""The rows a fenced transaction writes beside its change: the audit entry and the idempotency record.

The fenced unit (`fenced.py`) builds their parameters here and decides a
retry here:

- A write with an `Idempotency-Key` first looks up the client's record. If
  it exists and stands for the same request (method, key, resource, token,
  body, Content-Type), the first outcome is returned and nothing is applied, not even the
  fence check: the write already happened, and a newer token since then must
  not turn the retry into a 409 for a write that succeeded. If it stands for
  a different request, the retry is refused (nothing changes).
- An accepted request (the fence passed) writes its audit entry after the
  fence upsert, in the same transaction, so the entry exists exactly when the
  change does, and per resource the entries' ids follow commit order.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from storage.errors import IdempotencyKeyConflict
from storage.protocols import Caller, ObjectMeta, Refused

ACCEPTED = "accepted"  # the fence passed and the change committed
NOT_FOUND = "not_found"  # the fence passed (the mark rose) but there was no object to read or delete
REPLAYED = "replayed"  # an Idempotency-Key retry answered from its first outcome
# A proxy-mode retry that met its first attempt still under way at the store (`storage.pending`): what
# it was answered is not known yet, and follows in an entry of its own once it is.
PENDING, PENDING_STATUS = "pending", 202
# An idempotency record's version when its DELETE found no object: the 404 is the outcome a retry replays
# (no object has version 0; in proxy mode `storage.pending` gives the column its states).
GONE_VERSION = 0
FENCE_PASSED = (ACCEPTED, NOT_FOUND)  # outcomes whose token raised (or kept) the mark


def audit_params(
    caller: Caller,
    *,
    method: str,
    key: str | None,
    resource: str,
    token: int,
    mark: int | None,
    status: int,
    outcome: str,
    now: datetime,
) -> dict[str, Any]:
    """The bound parameters of `Statements.audit_insert` for a request decided in this transaction."""
    return {
        "at": now,
        "client": caller.client,
        "method": method,
        "key": key,
        "resource": resource,
        "token": token,
        "mark": mark,
        "status": status,
        "outcome": outcome,
    }


def refused_params(entry: Refused) -> dict[str, Any]:
    """The bound parameters of `Statements.audit_insert` for a refused request."""
    return {
        "at": entry.at,
        "client": entry.client,
        "method": entry.method,
        "key": entry.key,
        "resource": entry.resource,
        "token": entry.token,
        "mark": entry.mark,
        "status": entry.status,
        "outcome": entry.outcome,
    }


def idempotency_params(caller: Caller, meta: ObjectMeta, *, now: datetime) -> dict[str, Any]:
    """The bound parameters of `Statements.idempotency_insert` for an accepted write (`meta`), or for a
    delete that found no object (`meta.version` is `GONE_VERSION`)."""
    assert caller.idempotency_key is not None
    return {
        "client": caller.client,
        "idempotency_key": caller.idempotency_key,
        "request_digest": caller.request_digest,
        "key": meta.key,
        "resource": meta.resource,
        "token": meta.token,
        "version": meta.version,
        "size": meta.size,
        "digest": meta.digest,
        "created": meta.created,
        "at": now,
    }


def replay(caller: Caller, record: Mapping[str, Any]) -> ObjectMeta:
    """The first outcome recorded under the caller's Idempotency-Key, if this is the same request."""
    if record["request_digest"] not in (caller.request_digest, caller.legacy_digest or caller.request_digest):
        raise IdempotencyKeyConflict(
            f"Idempotency-Key {caller.idempotency_key!r} was already used by this client for a different "
            f"request ({record['key']!r} with token {record['token']}); use a fresh key for a new request",
            idempotency_key=caller.idempotency_key or "",
        )
    return ObjectMeta(
        key=record["key"],
        resource=record["resource"],
        token=record["token"],
        version=record["version"],
        size=record["size"],
        digest=record["digest"],
        created=bool(record["created"]),
        replayed=True,
    )


def unfinished(meta: ObjectMeta) -> bool:
    """Whether a replayed record stands for a proxy-mode write still under way (no outcome yet):
    `storage.pending` keeps NULL or a negative state in the version column until the store answers."""
    return meta.version is None or meta.version < GONE_VERSION


def status_of(method: str, meta: ObjectMeta) -> int:
    """The status an accepted request is answered with (recorded in its audit entry)."""
    return 201 if method == "PUT" and meta.created else 200
