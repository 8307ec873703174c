"""Where a scenario runs: its lock nodes, its proxies, its clients, and the shared choreography.

Every scenario follows one script, so the same seed gives the same schedule of
faults in every mode. The holder c1 starts alone; the others wait at their
"start" checkpoint until c1 has read the counter. At c1's checkpoints the
scenario injects its fault (`before_acquire`, `after_acquire`, `after_read`);
then the holder either stays frozen (pause) or works on slowly but within its
own lease: it goes on once another client has written, or when its lease is
about to end, whichever comes first. That is exactly where a lock alone
lets the challenger in while the holder still believes it holds the lease.
A challenger that has written waits (at its "wrote" checkpoint) until the
holder's first lease is over, so the holder's late write meets the store
right after the challenger's, as in Kleppmann's figure, not after a race.

A `Deployment` builds the lock and the store for the mode under test, so the
lab's locks, Redlock, the gateway with the fence on or moot, or a test-only
store all plug in: the scenarios never know which they drive.

With five lock nodes, the scenarios that fault node C also partition the
clients (`Scenario.partitioned`): each client reaches each node through a
`DelayProxy` of its own, the holder is cut off from D and E and the others
from A and B until the holder's first lease is over, as in Kleppmann's A..E
example. With one node there is nothing to partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from fencegate.lab.client import ClientConfig
from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.errors import FaultError
from fencegate.lab.faults.clock import ClockShift
from fencegate.lab.faults.nodes import ReplicatedPair
from fencegate.lab.faults.proxy import DelayProxy
from fencegate.lab.history import Event, History, Meta
from fencegate.lab.protocols import Deployment, HeldPath
from fencegate.lab.runner import Checkpoint, ClientProcess, Runner
from fencegate.lab.workload import WorkloadSettings

HOLDER = "c1"
CHALLENGER = "c2"
HOLDER_MARGIN = 0.25  # the slow holder goes on once this fraction of its TTL is left
CHALLENGER_WAIT = 30.0  # no scenario waits longer than this for the challenger's write
PARTITION_WAIT = 90.0  # the partition lasts the holder's first lease, which ends well within this
HOLD_CUT = 3600.0  # a link cut by the partition holds every byte; healing drops them
PARTITION_NODES = 5  # the five-node versions need a majority on each side of the faulted node C


@dataclass
class Stage:
    """What a scenario may act on during its run."""

    runner: Runner
    cluster: LocalCluster
    ttl: float
    lock_urls: list[str]
    tokens_url: str  # the redis an INCR token source uses
    faulted: str  # the name of the lock node the node faults hit ("C" of A..E with five)
    proxies: dict[str, DelayProxy] = field(default_factory=dict)  # client -> its proxy to the store
    links: dict[str, list[DelayProxy]] = field(default_factory=dict)  # client -> its proxy to each lock node
    shift: ClockShift | None = None
    pair: ReplicatedPair | None = None
    skew: ClockShift | None = None  # the challenger's own wall clock, where the scenario skews it
    path: HeldPath | None = None  # a deployment whose replica's path to its store can be held
    # set by a scenario that acts on the store for a challenger: the challengers go on once it is set
    challengers_wait: asyncio.Event | None = None

    def urls_for(self, client: str) -> list[str]:
        """The lock nodes as `client` reaches them: through its own links when the scenario partitions."""
        links = self.links.get(client)
        return self.lock_urls if links is None else [f"redis://127.0.0.1:{link.port}" for link in links]

    def cut(self) -> str:
        """The partition of Kleppmann's A..E example: the holder reaches A, B, C; the others C, D, E."""
        faulted = min(2, len(self.lock_urls) - 1)
        for client, links in self.links.items():
            for index, link in enumerate(links):
                if (index > faulted) if client == HOLDER else (index < faulted):
                    link.hold(HOLD_CUT, direction="both")
        names = "ABCDEFGHI"[: len(self.lock_urls)]
        return (
            f"partition: {HOLDER} reaches {', '.join(names[: faulted + 1])}; "
            f"the others reach {', '.join(names[faulted:])}"
        )

    async def heal_after_first_lease(self) -> None:
        """Once the holder's first lease is over, every client reaches every node again."""
        await self.runner.wait_for(_holder_done, within=PARTITION_WAIT, what="the holder's first lease")
        for links in self.links.values():
            for link in links:
                await link.drop()  # bytes held in the cut are lost, as on a broken link
                link.hold(0, direction="both")
        self.runner.note("fault", HOLDER, "partition healed")

    def holder_until(self) -> float | None:
        """The validity end of the holder's first lease, by its own clock (None: no validity)."""
        for event in self.runner.events():
            if event.client == HOLDER and event.kind == "acquire" and event.outcome == "ok":
                return event.until
        return None

    async def challenger_wrote(self) -> None:
        """Wait until a client other than the holder has a write answered (accepted or refused)."""
        await self.runner.wait_for(_challenger_wrote, within=CHALLENGER_WAIT, what="another client's write")

    async def work_on_slowly(self) -> None:
        """The holder goes on once a challenger wrote, or when its own lease is about to end."""
        until = self.holder_until()
        if until is None:
            await self.challenger_wrote()
            return
        deadline = until - self.ttl * HOLDER_MARGIN - time.monotonic()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(deadline, 0.0)):
                await self.challenger_wrote()


def _challenger_wrote(events: list[Event]) -> bool:
    return any(e.client != HOLDER and e.kind == "write" and e.outcome != "sent" for e in events)


def _holder_read(events: list[Event]) -> bool:
    return any(e.client == HOLDER and e.kind == "read" and e.outcome != "sent" for e in events)


def _holder_done(events: list[Event]) -> bool:
    """The holder's first iteration is over: it released (or never got) its first lease."""
    first = f"{HOLDER}/1"
    return any(
        e.lease == first and (e.kind == "release" or (e.kind == "acquire" and e.outcome == "error"))
        for e in events
    )


class Scenario:
    """A fault schedule; subclasses override the hooks they need. Hooks run while the holder waits."""

    name = "none"
    summary = "no fault: the clients take turns"
    proxied = False  # clients reach the store through a DelayProxy of their own
    shifted = False  # the faulted lock node runs on the clock shim
    replicated = False  # the faulted lock node is a master with an async replica
    tokens_on_lock_node = False  # an INCR token source lives on the faulted lock node
    partitioned = False  # with five lock nodes: holder cut off from D, E, the others from A, B
    skew_ttls = 0.0  # > 0: the challenger's wall clock runs this many TTLs ahead, all run long (clock shim)
    # only c2 contends during the holder's first lease: the first token it draws after the fault is the one
    # that wins (with several challengers drawing at once, the winner may hold the second token drawn)
    lone_challenger = False

    async def before_acquire(self, stage: Stage, holder: ClientProcess) -> None:
        return None

    async def after_acquire(self, stage: Stage, holder: ClientProcess, at: Checkpoint) -> None:
        return None

    async def after_read(self, stage: Stage, holder: ClientProcess, at: Checkpoint) -> None:
        await stage.work_on_slowly()


@dataclass(frozen=True)
class RunPlan:
    """How big a run is: the same for every mode of one comparison."""

    clients: int = 3
    ops: int = 3
    ttl: float = 1.0
    seed: int = 1
    resource: str = "counter"


@contextlib.asynccontextmanager
async def _stage(
    scenario: Scenario, deployment: Deployment, runner: Runner, cluster: LocalCluster, plan: RunPlan
) -> AsyncIterator[Stage]:
    """Start the lock nodes (one faulted as the scenario needs) and the proxies; undo all of it."""
    count = deployment.lock_nodes  # 0: the lock lives on servers of its own (etcd), no node fault applies
    if count < 0:
        raise FaultError(f"the deployment uses {count} lock nodes; give 0 or more")
    faulted_index = min(2, count - 1)
    shift = ClockShift(cluster.dir / "clock-offset") if scenario.shifted else None
    skew = ClockShift(cluster.dir / "challenger-clock-offset") if scenario.skew_ttls else None
    if skew is not None:
        skew.jump(plan.ttl * scenario.skew_ttls)
    pair: ReplicatedPair | None = None
    proxies: dict[str, DelayProxy] = {}
    links: dict[str, list[DelayProxy]] = {}
    faulted = ""
    try:
        urls = []
        for index in range(count):
            if index == faulted_index and scenario.replicated:
                pair = await ReplicatedPair.start(cluster)
                urls.append(pair.url)
                faulted = pair.master.name
            else:
                env = shift.env() if shift is not None and index == faulted_index else None
                node = await asyncio.to_thread(cluster.add_redis, env=env)
                urls.append(node.url)
                if index == faulted_index:
                    faulted = node.name
        if scenario.proxied:
            for number in range(1, plan.clients + 1):
                proxies[f"c{number}"] = await DelayProxy(*deployment.store_address).start()
        if scenario.partitioned and count >= PARTITION_NODES:
            for number in range(1, plan.clients + 1):
                links[f"c{number}"] = [await DelayProxy(*_host_port(url)).start() for url in urls]
        if scenario.tokens_on_lock_node:
            tokens = urls[faulted_index]
        elif count:
            tokens = (await asyncio.to_thread(cluster.add_redis)).url
        else:
            tokens = ""  # no redis at all: the design brings its own tokens
        path = deployment if isinstance(deployment, HeldPath) else None
        yield Stage(runner, cluster, plan.ttl, urls, tokens, faulted, proxies, links, shift, pair, skew, path)
    finally:
        for proxy in [*proxies.values(), *(link for client in links.values() for link in client)]:
            await proxy.aclose()
        if pair is not None:
            await pair.aclose()


async def run_scenario(
    scenario: Scenario, deployment: Deployment, *, plan: RunPlan, meta: Meta, workdir: Path
) -> History:
    """One run of `scenario` in the deployment's mode: its history, with the final counter value."""
    if plan.clients < 2:
        raise FaultError(f"{scenario.name} needs a holder and a challenger: run it with at least 2 clients")
    runner = Runner(workdir)
    cluster_dir = workdir / "cluster"
    async with (
        LocalCluster.running_async(ClusterSpec(redis=0), cluster_dir) as cluster,
        _stage(scenario, deployment, runner, cluster, plan) as stage,
    ):
        configs = [_config(stage, deployment, plan, number, workdir) for number in range(1, plan.clients + 1)]
        if stage.links:
            runner.note("fault", HOLDER, stage.cut())
            runner.background(stage.heal_after_first_lease())
        if stage.skew is not None:
            runner.note("fault", CHALLENGER, f"{CHALLENGER}'s wall clock {stage.skew.offset:+g}s")

        async def on_checkpoint(runner: Runner, client: ClientProcess, at: Checkpoint) -> None:
            if client.name != HOLDER and at.point == "start":
                await runner.wait_for(_holder_read, within=CHALLENGER_WAIT, what="the holder's read")
                if scenario.lone_challenger and client.name != CHALLENGER:
                    await runner.wait_for(
                        _holder_done, within=CHALLENGER_WAIT, what="the holder's first lease"
                    )
            elif client.name != HOLDER:  # after its first write: the holder's (stale) write comes first
                await runner.wait_for(_holder_done, within=CHALLENGER_WAIT, what="the holder's first lease")
                if stage.challengers_wait is not None:
                    async with asyncio.timeout(CHALLENGER_WAIT):
                        await stage.challengers_wait.wait()
            elif at.point == "start":
                await scenario.before_acquire(stage, client)
            elif at.point == "acquired":
                await scenario.after_acquire(stage, client, at)
            elif at.point == "read":
                await scenario.after_read(stage, client, at)

        run_meta = replace(meta, scenario=scenario.name)
        history = await runner.run(configs, meta=run_meta, on_checkpoint=on_checkpoint)
    return history.with_final(await deployment.final())


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        raise FaultError(f"lock node URL {url!r} has no host:port; the partition proxies need one")
    return parts.hostname, parts.port


def _config(stage: Stage, deployment: Deployment, plan: RunPlan, number: int, workdir: Path) -> ClientConfig:
    name = f"c{number}"
    proxy = stage.proxies.get(name)
    address = ("127.0.0.1", proxy.port) if proxy is not None else deployment.store_address
    if stage.path is not None:  # several replicas: the holder sends through the one whose path is held
        address = stage.path.address_for(name)
    points = {("start", 0), ("acquired", 1), ("read", 1)} if name == HOLDER else {("start", 0), ("wrote", 1)}
    return ClientConfig(
        settings=WorkloadSettings(
            client=name, resource=plan.resource, ops=plan.ops, ttl=plan.ttl, checkpoints=frozenset(points)
        ),
        lock=deployment.lock(stage.urls_for(name), tokens=stage.tokens_url),
        store=deployment.store(address),
        events=str(workdir / f"{name}.jsonl"),
        seed=plan.seed,
        env=stage.skew.env() if stage.skew is not None and name == CHALLENGER else {},
    )
