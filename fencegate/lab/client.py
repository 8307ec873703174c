"""One lab client as its own OS process: `python -m fencegate.lab.client CONFIG.json`.

Real processes, so that a pause is a real SIGSTOP of the whole client (its
event loop, its connections, any lease-extension task) as in a GC pause. The
config names the lock and the store as factories ("module:function" plus
keyword arguments), so any `LabLock` and `CounterStore` plug in: the lab's
own locks today, Redlock and the gateway client as well.

Checkpoint protocol, on the client's stdin/stdout: at a checkpoint the lab
asked for, the client prints one JSON line `{"checkpoint": POINT,
"iteration": N, "lease": ID}` and waits for one line on stdin before it goes
on. Everything else the client says goes to stderr.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fencegate.lab.errors import RunnerError
from fencegate.lab.history import EventLog
from fencegate.lab.protocols import Component
from fencegate.lab.workload import Checkpoint, Workload, WorkloadSettings


@dataclass(frozen=True)
class ClientConfig:
    """Everything one client process needs; written as JSON by the runner."""

    settings: WorkloadSettings
    lock: Component
    store: Component
    events: str  # path of this client's JSON Lines event file
    seed: int
    env: Mapping[str, str] = field(default_factory=dict)  # added to the process's environment (a clock shim)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["settings"]["checkpoints"] = sorted(self.settings.checkpoints)
        data["env"] = dict(self.env)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClientConfig:
        settings = dict(data["settings"])
        settings["checkpoints"] = frozenset((p, int(i)) for p, i in settings.get("checkpoints", ()))
        return cls(
            settings=WorkloadSettings(**settings),
            lock=Component(**data["lock"]),
            store=Component(**data["store"]),
            events=data["events"],
            seed=int(data["seed"]),
            env=dict(data.get("env", {})),
        )


def _checkpoint_for(client: str) -> Checkpoint:
    """The client's side of the checkpoint protocol: announce on stdout, wait for a line on stdin."""

    async def checkpoint(point: str, iteration: int, lease: str) -> None:
        sys.stdout.write(json.dumps({"checkpoint": point, "iteration": iteration, "lease": lease}) + "\n")
        sys.stdout.flush()
        answer = await asyncio.to_thread(sys.stdin.readline)
        if not answer:
            raise RunnerError("the lab closed the checkpoint channel; stopping", client=client)

    return checkpoint


async def run_client(config: ClientConfig) -> None:
    lock = config.lock.build()
    store = config.store.build()
    try:
        with EventLog(config.events) as log:
            workload = Workload(
                config.settings,
                lock=lock,
                store=store,
                log=log,
                rng=random.Random(f"{config.seed}/{config.settings.client}"),
                checkpoint=_checkpoint_for(config.settings.client),
            )
            await workload.run()
    finally:
        await lock.aclose()
        await store.aclose()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m fencegate.lab.client CONFIG.json (written by the lab runner)\n")
        return 2
    config = ClientConfig.from_json(json.loads(Path(args[0]).read_text()))
    asyncio.run(run_client(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
