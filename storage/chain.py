"""The audit trail's hash chain: each entry's hash covers the hash before it, so an edit shows.

One chain per database. `fencegate_audit_head` holds one row: the id and the
hash of the last entry. A transaction that appends entries locks that row
last (after every fence row it took, so lock order stays fence rows in
resource order, then the head: no deadlock), numbers its entries from the
head's id on, hashes them here with `link`, inserts them and moves the head,
all before its commit. Two replicas on one PostgreSQL therefore append one
after the other and cannot fork the chain, and ids follow chain order.

An entry's hash is sha256 over the previous hash and a canonical encoding
of its fields, its id included (`entry_hash`): changing, removing or
reordering an entry breaks the link at it or just after it
(`storage/verify.py`). PostgreSQL's group-commit writer hashes in the
server instead (`postgresql/group_commit.py`'s `APPEND`: the head is locked, the entries numbered,
hashed and inserted, and the head moved, in one statement, so the lock that
serializes every append is held for one round trip before the commit, not
three); the fields are still encoded here (`entry_tail`), and the statement
only joins the previous hash, the id and that encoding as `entry_hash`
does, byte for byte (tests/storage/test_chain.py compares the two).
Truncating the tail leaves a valid shorter chain: the head row catches that
unless it was rewritten too, and a head exported from the log (`announce`,
every `EXPORT_EVERY` entries and at shutdown) catches even that.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.errors import StorageUnavailable, map_storage_errors
from storage.models import AuditHead
from storage.rows import Decoder
from storage.statements import HEAD_ROW

log = logging.getLogger(__name__)

GENESIS = "0" * 64  # the "previous hash" of the first entry
EXPORT_EVERY = 1_000  # the head is logged each time the trail passes a multiple of this many entries
HASHED = ("id", "at", "client", "method", "key", "resource", "token", "mark", "status", "outcome")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HEAD = re.compile(r"^(?P<hash>[0-9a-f]{64})@(?P<id>[0-9]+)$")


@dataclass(frozen=True, slots=True)
class Head:
    """The last entry of a chain: its id and its hash (`HASH@ID` when exported)."""

    last_id: int
    hash: str

    def __str__(self) -> str:
        return f"{self.hash}@{self.last_id}"

    @classmethod
    def parse(cls, text: str) -> Head:
        """`HASH@ID` as `fencegate audit verify` prints and the gateway logs it; ValueError otherwise."""
        found = _HEAD.match(text.strip().lower())
        if found is None:
            raise ValueError(f"{text!r} is not a chain head; give HASH@ID as the gateway logged it")
        return cls(int(found["id"]), found["hash"])


GENESIS_HEAD = Head(0, GENESIS)


def _micros(at: datetime) -> int:
    """`at` as microseconds since the epoch; a naive time (SQLite reads them back so) is UTC."""
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return (aware - _EPOCH) // timedelta(microseconds=1)


def entry_tail(entry: Mapping[Any, Any]) -> str:
    """The canonical encoding of an entry's fields after its id: ASCII JSON, closing bracket included."""
    fields = [_micros(entry["at"]) if name == "at" else entry[name] for name in HASHED[1:]]
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=True)[1:]


def entry_hash(previous: str, entry: Mapping[Any, Any]) -> str:
    """The hash of `entry` (an audit row's fields) chained to `previous`: sha256 of `PREVIOUS\\n[ID,TAIL`."""
    return hashlib.sha256(f"{previous}\n[{int(entry['id'])},{entry_tail(entry)}".encode()).hexdigest()


def link(head: Head, entries: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], Head]:
    """Number `entries` after `head`, hash each onto the one before; the rows to insert, the new head."""
    rows: list[dict[str, Any]] = []
    last_id, previous = head.last_id, head.hash
    for entry in entries:
        last_id += 1
        at: datetime = entry["at"]
        if at.tzinfo is not None and at.tzinfo is not UTC:  # kept as is otherwise: a batch shares one `at`
            at = at.astimezone(UTC)
        row = {**entry, "id": last_id, "at": at}
        previous = row["chain"] = entry_hash(previous, row)
        rows.append(row)
    return rows, Head(last_id, previous)


def head_of(row: Mapping[Any, Any] | None) -> Head:
    """The head row as a statement returned it; a missing row stops every write (the chain would fork)."""
    if row is None:
        raise StorageUnavailable(
            "the audit chain's head row (fencegate_audit_head) is missing, so no entry can be chained; "
            "run `fencegate audit verify` and restore the database from a backup"
        )
    return Head(int(row["last_id"]), str(row["hash"]))


def announce(before: Head, after: Head) -> None:
    """Log the head when a commit took the trail past a multiple of `EXPORT_EVERY` entries."""
    if after.last_id // EXPORT_EVERY > before.last_id // EXPORT_EVERY:
        log.info("audit chain head %s (keep it: fencegate audit verify --head %s)", after, after)


async def read_head(engine: AsyncEngine) -> Head:
    """The head row of the database behind `engine`; `MalformedRow` if it was edited to hold what
    fencegate never writes (read at shutdown, where that must be a warning, not a traceback)."""
    decode = Decoder(AuditHead, ("last_id", "hash"), engine.dialect)
    with map_storage_errors("audit chain head lookup"):
        async with engine.connect() as conn:
            found = (await conn.execute(select(*decode.stored).where(AuditHead.id == HEAD_ROW))).first()
    return head_of(None if found is None else decode(found._mapping))
