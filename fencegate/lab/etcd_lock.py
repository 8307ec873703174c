"""The lab's etcd lock design, as etcd's own concurrency package builds it (`Session` + `Mutex`).

- Session: a lease granted per acquisition and kept alive by the client
  (a refresh every third of its TTL); revoking it on release deletes the key.
- Mutex: the lock key is `<prefix><lease id>`, put under the lease by a
  transaction that creates it only if its create revision is 0 (absent).
  The holder is the key under the prefix with the lowest create revision; a
  waiter watches the key with the next lower create revision for its
  deletion, then looks again, so waiters are served in create-revision order.
  Each look first checks that its own key is still there: a session that
  expired in line must not take the lock (the client bug Jepsen found in
  etcd 3.4.3 was that missing check).
- Token: the lock key's create revision, etcd's cluster-wide revision at the
  moment the key was made. A later holder's key was made later, so its
  revision is larger: the fence needs no second token source.

The lease lives on etcd's clock, not the client's: a client that stops (a
SIGSTOP, a long GC pause) stops refreshing, the lease expires, the key goes,
the next waiter holds the lock, and the stopped client, once resumed, still
believes it holds it. Nothing in the lock can tell it otherwise before its
next request; only the resource checking the revision can (etcd's docs say so).

`acquire` waits in line at most `wait` seconds, then gives its place up
(revokes its lease) and raises `LockNotAcquired`; the workload retries.
It talks to the first endpoint (no member fault applies to this design).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

import aetcd
from aetcd.exceptions import ClientError, WatchTimeoutError
from aetcd.rtypes import EventKind

from fencegate.lab.errors import LabLockError
from fencegate.lab.protocols import LeaseInfo
from lockclient.errors import LockNotAcquired
from lockclient.tokens.etcd import parse_endpoints

PREFIX = "/fencegate/lab/lock/"
REQUEST_TIMEOUT = 2.0  # one request to the member; a loaded 2-core machine answers well within it
WAIT_TTLS = 10  # a waiter stays in line this many TTLs before it gives its place up
REFRESHES_PER_TTL = 3  # as etcd's client: a keepalive every third of the TTL


def lock_prefix(resource: str) -> bytes:
    return f"{PREFIX}{resource}/".encode()


class _Session:
    """One lease kept alive in the background; `alive_since` is when the last refresh that worked left."""

    def __init__(self, client: Any, lease: Any, clock: Callable[[], float], sent: float) -> None:
        self.lease = lease
        self.ttl = float(lease.ttl)  # what etcd granted: whole seconds, at least its minimum
        self.alive_since = sent
        self.lost = False
        self._client = client
        self._clock = clock
        self._task = asyncio.create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / REFRESHES_PER_TTL)
            sent = self._clock()
            try:
                reply = await self._client.refresh_lease(self.lease.id)
            except ClientError:
                continue  # the next refresh may get through; etcd expires the lease if none does
            if reply is None or reply.TTL <= 0:
                self.lost = True  # expired on etcd: the key is gone
                return
            self.alive_since = sent

    async def close(self) -> bool:
        """Stop refreshing and revoke the lease; True if it was still alive on etcd."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        try:
            await self._client.revoke_lease(self.lease.id)
        except ClientError as exc:
            if "not found" in str(exc):
                return False  # it expired: etcd deleted the key long ago
            raise
        return not self.lost


class EtcdLock:
    """etcd's Session + Mutex; with `tokens`, each lease carries its key's create revision."""

    def __init__(
        self,
        url: str,
        *,
        tokens: bool = False,
        wait_ttls: float = WAIT_TTLS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not url.startswith("etcd://"):
            raise LabLockError(f"etcd lock URL {url!r} must look like etcd://HOST:PORT[,...]", resource="")
        host, port = parse_endpoints(url.removeprefix("etcd://"))[0]
        self._client = aetcd.Client(host=host, port=port, timeout=REQUEST_TIMEOUT)
        self._tokens = tokens
        self._wait_ttls = wait_ttls
        self._clock = clock
        self._sessions: dict[str, _Session] = {}

    async def acquire(self, resource: str, ttl: float) -> LeaseInfo:
        sent = self._clock()
        try:
            lease = await self._client.lease(max(1, math.ceil(ttl)))
        except ClientError as exc:
            raise LockNotAcquired(f"etcd refused a lease: {exc}", resource=resource) from exc
        session = _Session(self._client, lease, self._clock, sent)
        try:
            revision = await self._wait_in_line(resource, session, deadline=sent + ttl * self._wait_ttls)
        except BaseException:
            with contextlib.suppress(ClientError):
                await session.close()  # give the place in line up: the next waiter goes on
            raise
        owner = f"{lock_prefix(resource).decode()}{lease.id:x}"
        self._sessions[owner] = session
        return LeaseInfo(
            resource=resource,
            owner=owner,
            token=revision if self._tokens else None,
            until=session.alive_since + session.ttl,
        )

    async def _wait_in_line(self, resource: str, session: _Session, *, deadline: float) -> int:
        """Create our key if absent, then wait for every key with a lower create revision to go."""
        prefix = lock_prefix(resource)
        key = prefix + f"{session.lease.id:x}".encode()
        tx = self._client.transactions
        try:
            created, responses = await self._client.transaction(
                compare=[tx.create(key) == 0],
                success=[tx.put(key, b"", lease=session.lease.id)],
                failure=[tx.get(key)],
            )
            if created:
                mine = int(responses[0].response_put.header.revision)
            else:  # our key from an earlier round of this session: the same place in line
                mine = int(responses[0][0][1].create_revision)
            while True:
                found = await self._client.get_prefix(prefix, sort_order="ascend", sort_target="create")
                if key not in {kv.key for kv in found}:  # the check etcd 3.4.3's client lacked (Jepsen)
                    raise LockNotAcquired(f"the session of {resource} expired in line", resource=resource)
                before = [kv for kv in found if kv.create_revision < mine]
                if not before:
                    return mine
                left = deadline - self._clock()
                if left <= 0:
                    raise LockNotAcquired(f"{resource} is held; gave up the place in line", resource=resource)
                with contextlib.suppress(WatchTimeoutError):
                    await self._client.watch_once(
                        before[-1].key,
                        timeout=left,
                        start_revision=int(found.header.revision) + 1,
                        kind=EventKind.DELETE,
                    )
        except ClientError as exc:
            raise LockNotAcquired(f"etcd failed acquiring {resource}: {exc}", resource=resource) from exc

    async def release(self, lease: LeaseInfo) -> bool:
        session = self._sessions.pop(lease.owner, None)
        if session is None:
            return False
        try:
            return await session.close()
        except ClientError as exc:
            raise LabLockError(f"release of {lease.resource} failed: {exc}", resource=lease.resource) from exc

    async def aclose(self) -> None:
        for owner in list(self._sessions):
            session = self._sessions.pop(owner)
            with contextlib.suppress(ClientError):
                await session.close()
        await self._client.close()


def etcd_lock(url: str, tokens: bool = False) -> EtcdLock:
    """The factory a client process names (`lab.etcd_lock:etcd_lock`)."""
    return EtcdLock(url, tokens=tokens)


__all__ = ["PREFIX", "EtcdLock", "etcd_lock", "lock_prefix"]
