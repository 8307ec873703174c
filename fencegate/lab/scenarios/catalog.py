"""The scenarios of DESIGN.md, each built as the seed documents describe it.

Each hook runs at one of the holder's checkpoints; the holder waits there
until the hook returns. `Stage.work_on_slowly` keeps the holder inside its own
lease, so whatever goes wrong is the lock's fault, not the holder's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fencegate.lab.errors import FaultError
from fencegate.lab.faults.nodes import crash_restart
from fencegate.lab.history import Event
from fencegate.lab.runner import Checkpoint, ClientProcess
from fencegate.lab.scenarios.stage import CHALLENGER_WAIT, HOLDER, Scenario, Stage

HOLD_LONG = 3600.0  # the delayed write is held until the challenger has written, then let through
PATH_HOLDS = "replica A's path to the store holds it"
JUMP_TTLS = 10  # a clock jump of this many TTLs expires every key the node holds
DOWN_TTLS = 1.5  # the delayed restart keeps the node out this many TTLs (longer than any lease it knew)
SKEW_TTLS = 2.0  # the challenger's clock runs this far ahead: more than a TTL, so a fresh lease looks expired


def _hold_until_challenger_wrote(
    stage: Stage,
    holder: ClientProcess,
    at: Checkpoint,
    hold: Callable[[float], None],
    *,
    held: str,
    delivered: str,
) -> None:
    """Hold the holder's write (`hold(HOLD_LONG)`) until the challenger's write was answered, then let it
    through: the late delivery runs in the background, each step noted on the timeline."""
    hold(HOLD_LONG)
    stage.runner.note("fault", holder.name, held, lease=at.lease)

    async def deliver_late() -> None:
        try:
            await stage.challenger_wrote()
        finally:
            hold(0)
            stage.runner.note("fault", holder.name, delivered, lease=at.lease)

    stage.runner.background(deliver_late())


class Pause(Scenario):
    name = "pause"
    summary = "the holder is SIGSTOPped after its read, past its TTL, and resumed once another client wrote"

    async def after_read(self, stage: Stage, holder: ClientProcess, at: Checkpoint) -> None:
        holder.stop()
        stage.runner.note("pause", holder.name, "SIGSTOP (a stop-the-world pause)", lease=at.lease)
        try:
            await stage.challenger_wrote()
        finally:
            holder.cont()
            stage.runner.note("resume", holder.name, "SIGCONT", lease=at.lease)


class Delay(Scenario):
    name = "delay"
    summary = "the holder's write leaves in time, then sits in the network until another client wrote"
    proxied = True

    async def after_read(self, stage: Stage, holder: ClientProcess, at: Checkpoint) -> None:
        proxy = stage.proxies[holder.name]
        _hold_until_challenger_wrote(
            stage, holder, at, proxy.hold, held="network holds the write", delivered="held write delivered"
        )


class ProxyDelay(Scenario):
    """Two gateway replicas in front of one S3 store: the holder's write passes its replica's fence in
    time, then sits on the path from that replica to the store until another client wrote through the
    other replica."""

    name = "proxy-delay"
    summary = (
        "the holder's write passes its gateway replica in time, then sits on that replica's path to the S3 "
        "store until another client wrote through the other replica"
    )

    async def after_read(self, stage: Stage, holder: ClientProcess, at: Checkpoint) -> None:
        path = stage.path
        if path is None:
            raise FaultError(f"{self.name} holds a replica's path to its store: run it on an s3 store")
        _hold_until_challenger_wrote(
            stage, holder, at, path.hold_path, held=PATH_HOLDS, delivered="held write delivered to the store"
        )


class ProxyDelete(Scenario):
    """As proxy-delay, and the newer lease deletes the counter before the held write arrives.

    Once the challenger's write is answered, the stage deletes the counter through replica B with the
    challenger's token (its lease is live: the challenger is parked at its "wrote" checkpoint), lets the
    held write through, waits for its answer, then writes the challenger's value back with the same
    token, so the workload goes on with the counter where the challenger left it. A held write that
    recreates the deleted key is a stale write applied after a newer one.
    """

    name = "proxy-delete"
    summary = (
        "as proxy-delay, and the newer lease deletes the counter before the held write reaches the store, "
        "then recreates it"
    )

    async def after_read(self, stage: Stage, holder: ClientProcess, at: Checkpoint) -> None:
        path = stage.path
        if path is None:
            raise FaultError(f"{self.name} holds a replica's path to its store: run it on an s3 store")
        path.hold_path(HOLD_LONG)
        stage.runner.note("fault", holder.name, PATH_HOLDS, lease=at.lease)
        gate = stage.challengers_wait = asyncio.Event()

        async def delete_then_deliver() -> None:
            wrote = None
            try:
                await stage.challenger_wrote()
                wrote = next((e for e in stage.runner.events() if _challengers_write(e)), None)
                if wrote is not None and wrote.token is not None:
                    await path.delete(wrote.token)
                    stage.runner.note(
                        "fault", wrote.client, f"deleted with token {wrote.token}", lease=wrote.lease
                    )
            finally:
                path.hold_path(0)
                stage.runner.note("fault", holder.name, "held write delivered to the store", lease=at.lease)
            try:
                await stage.runner.wait_for(
                    _held_answered, within=CHALLENGER_WAIT, what="the held write's answer"
                )
                if wrote is not None and wrote.token is not None and wrote.value is not None:
                    await path.recreate(wrote.value, wrote.token)
                    stage.runner.note(
                        "fault", wrote.client, f"recreated with token {wrote.token}", lease=wrote.lease
                    )
            finally:
                gate.set()

        stage.runner.background(delete_then_deliver())


def _challengers_write(event: Event) -> bool:
    return event.client != HOLDER and event.kind == "write" and event.accepted


def _held_answered(events: list[Event]) -> bool:
    return any(e.lease == f"{HOLDER}/1" and e.kind == "write" and e.outcome != "sent" for e in events)


class ClockJump(Scenario):
    name = "clock-jump"
    summary = "the lock node's wall clock jumps forward past the TTL while the lease is held"
    shifted = True
    partitioned = True

    async def after_read(self, stage: Stage, holder: ClientProcess, at: Checkpoint) -> None:
        assert stage.shift is not None
        stage.shift.jump(stage.ttl * JUMP_TTLS)
        stage.runner.note(
            "fault", holder.name, f"{stage.faulted} clock +{stage.ttl * JUMP_TTLS:g}s", lease=at.lease
        )
        await stage.work_on_slowly()


class ClockSkew(Scenario):
    """The SETNX page's pattern trusts the clients' clocks: the challenger's, ahead, sees a live lock expired.

    The holder works on slowly inside its own lease, by its own (monotonic) clock, as everywhere else.
    """

    name = "clock-skew"
    summary = "a challenger's wall clock runs ahead by more than the TTL while the holder holds its lease"
    skew_ttls = SKEW_TTLS


class Restart(Scenario):
    name = "restart"
    summary = "the lock node crash-restarts without persistence while the lease is held"
    partitioned = True

    async def after_read(self, stage: Stage, holder: ClientProcess, at: Checkpoint) -> None:
        await crash_restart(stage.cluster, stage.faulted)
        stage.runner.note("fault", holder.name, f"{stage.faulted} restarted empty", lease=at.lease)
        await stage.work_on_slowly()


class TokenRegress(Restart):
    name = "token-regress"
    summary = "as restart, with a redis INCR token source on the restarted node: tokens go back"
    tokens_on_lock_node = True
    lone_challenger = True


class RestartDelayed(Scenario):
    name = "restart-delayed"
    summary = "as restart, but the node stays down longer than the TTL (the Redlock page's fix)"
    partitioned = True

    async def after_read(self, stage: Stage, holder: ClientProcess, at: Checkpoint) -> None:
        await asyncio.to_thread(stage.cluster.kill, stage.faulted)
        stage.runner.note("fault", holder.name, f"{stage.faulted} killed", lease=at.lease)

        async def come_back() -> None:
            await asyncio.sleep(stage.ttl * DOWN_TTLS)  # the fault itself: the node stays out this long
            await asyncio.to_thread(stage.cluster.restart, stage.faulted)
            stage.runner.note("fault", holder.name, f"{stage.faulted} back, empty")

        stage.runner.background(come_back())
        await stage.work_on_slowly()


class Failover(Scenario):
    name = "failover"
    summary = "the lock node's async replica misses the key; the master dies, the replica is promoted"
    replicated = True
    partitioned = True

    async def before_acquire(self, stage: Stage, holder: ClientProcess) -> None:
        assert stage.pair is not None
        await stage.pair.lag()

    async def after_acquire(self, stage: Stage, holder: ClientProcess, at: Checkpoint) -> None:
        assert stage.pair is not None
        await stage.pair.fail_over()
        stage.runner.note("fault", holder.name, "master died, replica promoted", lease=at.lease)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(),
        Pause(),
        Delay(),
        ClockJump(),
        ClockSkew(),
        Restart(),
        RestartDelayed(),
        Failover(),
        TokenRegress(),
        ProxyDelay(),
        ProxyDelete(),
    )
}
