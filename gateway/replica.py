"""`--upstream-ordering trust-path` runs as one replica per database: its claim, heartbeat and lapse.

In trust-path mode the upstream applies whatever arrives, and the order of a
resource's writes is kept only by this process's per-resource lock
(`gateway.upstream.ResourceLocks`). A second replica on the same database
would forward the same resource's writes at the same time, in whatever order
the two paths deliver them, so it is refused at start: one line naming the
instance that holds the claim and when it last beat (`storage.replicas` does
the claim in one conditional statement). A replica that stopped cleanly
deleted its row; one that crashed blocks the next for at most `STALE_BEATS`
heartbeat periods.

While running, the claim is renewed every period. Once this replica has not
renewed it for `STALE_BEATS - 1` periods (one short of the window another
replica waits for, so the two never both believe they hold it), or finds that
another instance took it over, its fenced requests and `/readyz` are 503
`replica_claim_lapsed` with nothing written; a lost claim stays lost until a
restart, which claims again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.config import STALE_BEATS
from gateway.errors import BadSetting, Unavailable
from storage import StorageError
from storage.replicas import beat, claim, release

log = logging.getLogger("gateway")

TRUST_PATH = "trust-path"
SLOT = "upstream-trust-path"  # the role one gateway per database may hold


class OneReplica:
    """This process's claim to be the one trust-path replica on `engine`'s database."""

    def __init__(
        self, engine: AsyncEngine, *, period: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._engine = engine
        self.period = period
        self.window = period * STALE_BEATS  # what a claimant waits for after this replica's last beat
        self._clock = clock
        self.instance = uuid.uuid4().hex
        self.holder = f"{socket.gethostname()} pid {os.getpid()}"[:255]
        self._valid_until = 0.0  # by `clock`: past it, this replica no longer counts on its claim
        self.lost = False

    async def start(self) -> None:
        """Claim the slot, or raise `BadSetting` naming the replica that holds it."""
        sent = self._clock()
        other = await claim(
            self._engine, slot=SLOT, instance=self.instance, holder=self.holder, window=self.window
        )
        if other is not None:
            raise BadSetting(
                f"another gateway with --upstream-ordering trust-path runs on this database: instance "
                f"{other.instance} ({other.holder}), last heartbeat {other.beat_ago:.1f} s ago; two would "
                "forward one resource's writes in whatever order their paths deliver them: stop it, or, if "
                f"it crashed, start this one again once its claim runs out (in {max(other.expires_in, 0):.1f}"
                " s)"
            )
        self._valid_until = sent + self.window - self.period

    @property
    def held(self) -> bool:
        return not self.lost and self._clock() < self._valid_until

    def check(self) -> None:
        """Raise 503 `replica_claim_lapsed` unless this replica still holds its claim."""
        if not self.held:
            reason = "another instance took it over" if self.lost else "its heartbeat did not reach storage"
            raise Unavailable(
                f"this gateway's claim as the one trust-path replica lapsed ({reason}); nothing was sent",
                code="replica_claim_lapsed",
            )

    async def run(self) -> None:
        """Renew the claim every period until cancelled or taken over."""
        while True:
            await asyncio.sleep(self.period)
            sent = self._clock()
            try:
                renewed = await beat(self._engine, slot=SLOT, instance=self.instance, window=self.window)
            except StorageError as exc:
                log.warning("trust-path heartbeat not written (%s); the claim runs out if this goes on", exc)
                continue
            if not renewed:
                self.lost = True
                log.error(
                    "trust-path claim lost: another instance took over this database's slot after this "
                    "replica's heartbeat lapsed; refusing every fenced request (503) until restarted"
                )
                return
            self._valid_until = sent + self.window - self.period

    async def aclose(self) -> None:
        """Delete this replica's row, so the next one starts at once."""
        if self.lost:
            return
        try:
            await release(self._engine, slot=SLOT, instance=self.instance)
        except StorageError as exc:
            log.warning("trust-path claim not released (%s); it runs out in %.0f s", exc, self.window)
