"""Group commit on PostgreSQL: a replica's concurrent fenced requests share a transaction and round trips.

The fenced unit (`fenced.py`) runs about six statements per request. One
transaction per request pays a round trip and a statement's client-side work
for each, and a commit (a WAL flush) per request. Here requests queue up;
when the previous batch has settled, what is pending (up to `max_batch`)
becomes one transaction in which the requests' units are stepped in
lockstep: every statement of a step goes to the server at once (asyncpg's
`fetchmany`: many executions, one round trip), then each unit gets its row
and runs to its next statement. A batch of N costs about five round trips
and one commit instead of 6N and N.

Why lockstep equals one request after another: a batch holds at most one
request per key and per idempotency record (the rest wait for the next
batch), so its requests meet only at fence rows, and each step runs its fence
upserts in batch order. Requests are sorted by resource (arrival order within
one), and all of a batch's fence upserts go in one step (a unit that looks up
its Idempotency-Key first is waited for), before anything else of that step,
so a batch takes its fence rows in resource order, at once, before it claims
key rows: two replicas' batches, or a replica's two lanes, do not wait on
each other in a cycle. A deadlock PostgreSQL reports all the same rolls the
batch back and runs it again, up to `MAX_RUNS` times. Audit entries are
inserted in the order of their fence upserts, so per resource their ids
follow commit order; they are chained onto the trail after the lockstep by
one statement (`APPEND`), the chain's head locked last and held for that
round trip and the commit.

A refusal wrote nothing (the unit's order), so it needs no savepoint. A
`Retry` (another replica committed a row this batch claimed: a key's binding,
an Idempotency-Key's record) rolls the batch back, sends the requests that
met it back to the queue, where the next batch meets the committed row (a
replay or a refusal), and runs the rest again at once without them, so a
retry racing its twin never costs its batch-mates a 503. No request is
answered before the COMMIT that holds it returned; if a statement or the
commit fails, every request of the batch is answered 503.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Generator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.chain import HASHED, Head, announce, entry_tail, head_of
from storage.errors import StorageError, StorageUnavailable
from storage.fenced import FENCED, Outcome, Policy, Retry, apply
from storage.limits import DEFAULT_LANES, DEFAULT_MAX_BATCH
from storage.models import AuditEntry, AuditHead
from storage.postgresql.connections import Lane, PgStatements
from storage.postgresql.reader import PgReader
from storage.protocols import FencedRequest, ObjectData
from storage.queued import Op, QueuedStore, settle
from storage.records import refused_params
from storage.sql import SqlObjectStore
from storage.statements import HEAD_ROW, Statements

log = logging.getLogger(__name__)

MAX_RUNS = 3  # a batch that met a deadlock runs this often before its requests are answered 503
_Row = Mapping[str, Any]
_AUDITED = HASHED[1:]  # an entry's columns besides its id and hash, in $2..$10 order
# Chain a batch's entries onto the trail in the server (`chain.py`): lock the head, number the entries
# after it, hash each as `chain.entry_hash` does (sha256 of `PREVIOUS\n[ID,TAIL`, TAIL from
# `entry_tail`), insert them, move the head; return the head before and after. $1 is the tails, $2..$10
# the `_AUDITED` columns, one array element per entry.
APPEND = f"""
WITH RECURSIVE
  head AS MATERIALIZED (
    SELECT last_id, hash FROM {AuditHead.__tablename__} WHERE id = {HEAD_ROW} FOR UPDATE
  ),
  entry AS MATERIALIZED (
    SELECT * FROM unnest($2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[],
                         $7::int8[], $8::int8[], $9::int4[], $10::text[])
      WITH ORDINALITY AS e({", ".join(_AUDITED)}, n)
  ),
  link (n, id, hash) AS (
    SELECT 0::int8, last_id, hash::text FROM head
    UNION ALL
    SELECT link.n + 1, link.id + 1, encode(sha256(convert_to(
             link.hash || E'\\n[' || (link.id + 1)::text || ',' || ($1::text[])[link.n + 1], 'UTF8')), 'hex')
    FROM link WHERE link.n < cardinality($1::text[])
  ),
  chained AS MATERIALIZED (SELECT * FROM link WHERE n > 0),
  inserted AS (
    INSERT INTO {AuditEntry.__tablename__} (id, {", ".join(_AUDITED)}, chain)
    SELECT chained.id, {", ".join(f"entry.{name}" for name in _AUDITED)}, chained.hash
    FROM chained JOIN entry ON entry.n = chained.n
  )
UPDATE {AuditHead.__tablename__} SET last_id = moved.id, hash = moved.hash
FROM (SELECT id, hash FROM chained ORDER BY n DESC LIMIT 1) AS moved, head
WHERE {AuditHead.__tablename__}.id = {HEAD_ROW}
RETURNING head.last_id AS before_id, head.hash AS before_hash, moved.id AS last_id, moved.hash AS last_hash
"""  # noqa: S608 (table names and the head's id are this module's constants; values are $n parameters)


async def append(pg: Any, entries: Sequence[Mapping[str, Any]]) -> tuple[Head, Head] | None:
    """Chain `entries` onto the trail in one statement (`APPEND`) on `pg`, in a transaction."""
    if not entries:
        return None
    columns = ([entry[name] for entry in entries] for name in _AUDITED)
    row = await pg.fetchrow(APPEND, [entry_tail(entry) for entry in entries], *columns)
    # no row: the head row is missing, nothing was inserted, and head_of refuses
    before = head_of(None if row is None else {"last_id": row["before_id"], "hash": row["before_hash"]})
    return before, Head(int(row["last_id"]), str(row["last_hash"]))


class _Statement:
    """One statement a unit waits on; the driver sends its row back through the coroutine."""

    __slots__ = ("index", "name", "params")

    def __init__(self, index: int, name: str, params: Mapping[str, Any]) -> None:
        self.index = index
        self.name = name
        self.params = params

    def __await__(self) -> Generator[_Statement, _Row | None, _Row | None]:
        row = yield self
        return row


class _Batch:
    """The shared state of one lockstep run: audit entries, and when each request's fence ran."""

    def __init__(self) -> None:
        self.audits: list[tuple[int, Mapping[str, Any]]] = []
        self.fenced_at: dict[int, int] = {}  # request index -> position of its fence upsert


class _RequestTx:
    """One request's `Tx` inside a lockstep batch."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    def row(self, statement: str, params: Mapping[str, Any]) -> _Statement:
        return _Statement(self._index, statement, params)

    async def audit(self, params: Mapping[str, Any]) -> None:
        self._batch.audits.append((self._index, params))


class _Raced(Exception):
    """Requests of the batch met a row another transaction committed meanwhile (their unit's `Retry`)."""

    def __init__(self, ops: list[Op]) -> None:
        super().__init__(f"{len(ops)} request(s) met a concurrent claim")
        self.ops = ops


async def run_lockstep(
    pg: Any, sql: PgStatements, requests: Sequence[FencedRequest], *, now: datetime, policy: Policy
) -> tuple[list[Outcome], list[Mapping[str, Any]]]:
    """Step every request's unit together on `pg` (an asyncpg connection in a transaction).

    Returns each request's outcome and the batch's audit parameters in fence order.
    """
    batch = _Batch()
    units = [
        apply(_RequestTx(batch, i), request, now=now, policy=policy) for i, request in enumerate(requests)
    ]
    outcomes: list[Outcome | None] = [None] * len(units)
    waiting: dict[int, _Statement] = {}
    fences = itertools.count()

    def step(index: int, row: _Row | None) -> None:
        try:
            statement = units[index].send(row)
        except StopIteration as done:
            outcomes[index] = done.value
            return
        waiting[index] = statement

    for index in range(len(units)):
        step(index, None)
    while waiting:
        now_waiting = dict(waiting)
        groups: dict[str, list[_Statement]] = {}
        waiting.clear()
        # A batch takes all its fence rows in one step, in resource order: while a unit has not reached
        # its fence yet (an Idempotency-Key's lookup comes first), the other units' fence upserts wait for
        # it. Two batches that took their rows over two steps could each hold one the other waits for.
        early = any(s.name != "fence_upsert" and i not in batch.fenced_at for i, s in now_waiting.items())
        for index in sorted(now_waiting):
            statement = now_waiting[index]
            if early and statement.name == "fence_upsert":
                waiting[index] = statement
                continue
            groups.setdefault(statement.name, []).append(statement)
        for name in Statements.names():  # fence upserts before key claims, in every step
            group = groups.get(name)
            if not group:
                continue
            if name == "fence_upsert":
                for statement in group:
                    batch.fenced_at[statement.index] = next(fences)
            records = await pg.fetchmany(sql.text[name], [sql.args(name, s.params) for s in group])
            for statement, record in zip(group, records, strict=True):
                step(statement.index, None if record[0] is None else record)  # a Record reads by name
    last = len(units)
    audits = sorted(batch.audits, key=lambda entry: batch.fenced_at.get(entry[0], last))
    done = [outcome for outcome in outcomes if outcome is not None]
    assert len(done) == len(units)
    return done, [params for _, params in audits]


class PgGroupCommitStore(QueuedStore):
    """`ObjectStore` for PostgreSQL that batches fenced requests; `await start()`, then `aclose()`."""

    def __init__(
        self,
        store: SqlObjectStore,
        *,
        engine: AsyncEngine,
        max_batch: int = DEFAULT_MAX_BATCH,
        lanes: int = DEFAULT_LANES,
        policy: Policy = FENCED,
        timeout: float = 10.0,
    ) -> None:
        """`timeout`: seconds a plain read, or a fenced request's wait for its batch, may take in all
        (`--storage-timeout`)."""
        super().__init__(store, max_batch=max_batch, deadline=timeout)
        self._engine = engine
        self._policy = policy
        self._lanes = max(1, lanes)
        self._sql = PgStatements()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._reader = PgReader(engine, timeout=timeout)

    async def start(self) -> None:
        self._running = True
        self._tasks = [
            asyncio.create_task(self._work(), name=f"fencegate-postgresql-writer-{lane}")
            for lane in range(self._lanes)
        ]

    async def aclose(self) -> None:
        """Refuse new requests, commit the pending ones, close the writer's and the readers' connections."""
        self._running = False
        self._wake.set()
        tasks, self._tasks = self._tasks, []
        try:
            await asyncio.gather(*tasks)
        finally:
            await self._reader.aclose()

    async def read(self, key: str, *, resource: str) -> ObjectData:
        return await self._reader.read(key)

    def _wake_writer(self) -> None:
        self._wake.set()

    async def ping(self) -> None:
        await self._store.ping()
        if not self._tasks or any(task.done() for task in self._tasks):
            raise StorageUnavailable("the group-commit writer is not running; restart the gateway")

    # -- the writer ----------------------------------------------------------

    async def _work(self) -> None:
        """One lane: take a batch, commit it on the lane's connection, answer it; until closed and drained."""
        lane = Lane(self._engine)
        try:
            while self._running or self._pending:
                if not self._pending:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                batch = self._take()
                if self._pending:
                    self._wake.set()  # more than one batch's worth: another lane can start now
                await self._run(lane, batch)
        finally:
            self._wake.set()  # another lane may wait for work this one leaves behind
            await lane.close()

    async def _run(self, lane: Lane, batch: list[Op]) -> None:
        try:
            outcomes = await self._commit(lane, batch)
        except Exception as exc:  # noqa: BLE001 - the lane outlives any one batch; logged, every request 503
            await lane.close(broken=True)
            self._not_committed(batch, exc)
            return
        self._committed()
        for op, outcome in zip(batch, outcomes, strict=True):
            settle(op.future, not isinstance(outcome, StorageError), outcome)

    def _take(self) -> list[Op]:
        """The next batch: pending requests in order, one per key and per idempotency record, by resource."""
        batch: list[Op] = []
        keys: set[str] = set()
        claims: set[tuple[str, str]] = set()
        later: deque[Op] = deque()
        while self._pending and len(batch) < self._max_batch:
            op = self._pending.popleft()
            request = op.request
            if request is not None:
                claim = (request.caller.client, request.caller.idempotency_key or "")
                if request.key in keys or (request.caller.idempotency_key and claim in claims):
                    later.append(op)
                    continue
                keys.add(request.key)
                claims.add(claim)
            batch.append(op)
        self._pending.extendleft(reversed(later))
        return sorted(batch, key=lambda op: "" if op.request is None else op.request.resource)

    async def _commit(self, lane: Lane, batch: list[Op]) -> list[Outcome | None]:
        """Commit `batch`, which shrinks by the requests that raced (they go back to the queue)."""
        deadlocks = 0
        while True:
            fenced = [op for op in batch if op.request is not None]
            requests = [op.request for op in fenced if op.request is not None]
            refusals = [refused_params(entry) for op in batch for entry in op.refusals]
            pg = await lane.connection()
            transaction = pg.transaction()
            await transaction.start()
            try:
                outcomes, audits = await run_lockstep(
                    pg, self._sql, requests, now=datetime.now(UTC), policy=self._policy
                )
                raced = [
                    op for op, outcome in zip(fenced, outcomes, strict=True) if isinstance(outcome, Retry)
                ]
                if raced:
                    raise _Raced(raced)
                moved = await append(pg, [*audits, *refusals])
            except _Raced as exc:
                # Only they met the committed row, and a later batch meets it too (a replay, or a
                # refusal); the rest run again at once without them, never sharing their race's 503.
                await transaction.rollback()
                raced_ids = {id(op) for op in exc.ops}
                batch[:] = [op for op in batch if id(op) not in raced_ids]
                self._pending.extendleft(reversed([op for op in exc.ops if not op.future.done()]))
                self._wake.set()
                log.info("a group commit met a concurrent transaction (%s): run again without them", exc)
                continue
            except asyncpg.DeadlockDetectedError as exc:
                await transaction.rollback()
                deadlocks += 1
                if deadlocks == MAX_RUNS:
                    raise StorageUnavailable(f"a batch met {MAX_RUNS} deadlocks in a row; retry") from exc
                log.info("a group commit met a deadlock (%s), run %d of %d", exc, deadlocks, MAX_RUNS)
                continue
            except BaseException:
                try:
                    await transaction.rollback()
                except Exception:
                    log.debug("rollback of a failed batch failed", exc_info=True)
                raise
            await transaction.commit()
            if moved is not None:
                announce(*moved)
            answers = iter(outcomes)
            return [None if op.request is None else next(answers) for op in batch]
