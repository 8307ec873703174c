"""The race the two-replica tests drive, whatever the store behind the replicas.

Two gateway processes (`Replica`), replica A's path to the store through the
lab's `DelayProxy`, held again and again while requests are in flight.
Clients race fresh and stale tokens over a few keys, deletes mixed in,
through either replica (`race`); a watcher reads the token each key holds
at the store the whole time, through a callable the test gives (how its
store is read). `Race.checked` asserts what every race must show (the
answers, enough writes accepted) and returns what the watch saw out of token
order and the highest-token 2xx per key; the test judges that against what
its store finally holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest

from fencegate.lab.faults.proxy import DelayProxy
from tests.waiting import eventually

KEYS = tuple(f"k{i}" for i in range(4))
SEED = 35
WORKERS = 12
DELETES = 0.12  # the share of requests that are deletes
LATE = 0.25  # the share of requests whose client waits a little between drawing its token and sending
HOLD, GAP = 0.4, 0.3  # seconds replica A's path is held, then let go, over and over
UPSTREAM_TIMEOUT = 10.0  # well past HOLD: the held writes are answered, not timed out
# the gateway under test (`safe`), and the control whose writes carry no preconditions: it must be caught
SAFE_OR_CONTROL = pytest.mark.parametrize(
    ("module", "safe"), [("fencegate.cli", True), ("fencegate.lab.unconditional_serve", False)],
    ids=["conditional", "control-without-preconditions"],
)  # fmt: skip
_LISTENING = re.compile(r"listening on (http://\S+)")
_REFUSED = re.compile(r"^fencegate_upstream_precondition_failures_total (\S+)$", re.MULTILINE)


@dataclass
class Outcome:
    """What one request was and how it was answered."""

    key: str
    method: str
    token: int
    body: bytes
    status: int


@dataclass
class Watch:
    """The tokens the store was seen holding per key, in the order read."""

    seen: dict[str, list[int]] = field(default_factory=lambda: {key: [] for key in KEYS})

    def decreases(self) -> list[str]:
        return [
            f"{key}: {before} then {after}"
            for key, tokens in self.seen.items()
            for before, after in itertools.pairwise(tokens)
            if after < before
        ]


class Replica:
    """One gateway process, its output in a log file."""

    def __init__(self, log: Path, module: str, args: list[str], env: dict[str, str]) -> None:
        self.log, self.module, self.args, self.env = log, module, args, env
        self.proc: asyncio.subprocess.Process | None = None
        self.url = ""

    async def start(self) -> str:
        import os

        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", self.module, "serve",
                "--port", "0", *self.args, stdout=out, stderr=out, env={**os.environ, **self.env},
            )  # fmt: skip

        def listening() -> bool:
            assert self.proc is not None
            if self.proc.returncode is not None:
                raise AssertionError(f"the replica exited: {self.log.read_text()[-2000:]}")
            found = _LISTENING.search(self.log.read_text())
            self.url = found.group(1) if found else ""
            return bool(found)

        await eventually(listening, within=60.0, what=f"{self.log.name} listening")
        return self.url

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()


@contextlib.asynccontextmanager
async def replica_pair(
    module: str, tmp_path: Path, a_args: list[str], b_args: list[str], env: dict[str, str]
) -> AsyncIterator[tuple[Replica, Replica]]:
    """Replicas A and B of `module` (logs a.log and b.log in `tmp_path`), started at once: their
    migrations serialize on the database's lock, and start-up is most of a short test's time."""
    a = Replica(tmp_path / "a.log", module, a_args, env)
    b = Replica(tmp_path / "b.log", module, b_args, env)
    try:
        async with asyncio.TaskGroup() as starting:
            starting.create_task(a.start())
            starting.create_task(b.start())
        yield a, b
    finally:
        await a.stop()
        await b.stop()


@dataclass
class Race:
    """How a race went: every request's outcome, what the watcher saw, replica A's metrics after."""

    ops: int
    outcomes: list[Outcome]
    watch: Watch
    metrics: str

    def checked(self, *, answers: set[int], where: str) -> tuple[list[str], dict[str, Outcome]]:
        """Asserts every request was answered, only with `answers`, and enough writes were accepted;
        returns the watch's violations (out of token order at `where`) and, per key with any, the
        2xx with the highest token."""
        assert len(self.outcomes) == self.ops
        answered = {outcome.status for outcome in self.outcomes}
        assert answered <= answers, f"unexpected answers: {answered}"
        accepted = [o for o in self.outcomes if o.status in (200, 201)]
        assert len(accepted) > self.ops // 10, "too few writes accepted for the race to mean anything"
        violations = [f"applied out of token order at {where}: {d}" for d in self.watch.decreases()]
        last = {
            key: max(mine, key=lambda o: o.token)
            for key in KEYS
            if (mine := [o for o in accepted if o.key == key])
        }
        return violations, last

    def refused(self) -> float:
        """How many of replica A's writes the store refused 412."""
        found = _REFUSED.search(self.metrics)
        return float(found.group(1)) if found else 0.0


async def race(
    session: aiohttp.ClientSession,
    a: Replica,
    b: Replica,
    proxy: DelayProxy,
    *,
    ops: int,
    token_at: Callable[[str], Awaitable[int | None]],
) -> Race:
    """Run the workload: `ops` requests over both replicas while replica A's path is held on and
    off; `token_at(key)` reads the token the store holds for `key` (None: none to order by)."""
    rng = random.Random(SEED)
    tokens, sent = itertools.count(1), itertools.count()
    outcomes: list[Outcome] = []
    watch = Watch()
    done = asyncio.Event()

    async def client() -> None:
        while next(sent) < ops:
            key, replica = rng.choice(KEYS), rng.choice((a, b))
            method = "DELETE" if rng.random() < DELETES else "PUT"
            token = next(tokens)
            if rng.random() < LATE:  # a holder that stalls after drawing its token: it races as a stale one
                await asyncio.sleep(rng.uniform(0.0, 0.05))
            body = f"{key} token {token}".encode()
            headers = {"Fencing-Token": str(token)}
            url = f"{replica.url}/v1/objects/{key}"
            data = body if method == "PUT" else None
            async with session.request(method, url, data=data, headers=headers) as answer:
                await answer.read()
                outcomes.append(Outcome(key, method, token, body, answer.status))

    async def path_faults() -> None:
        while not done.is_set():
            proxy.hold(HOLD)
            await asyncio.sleep(HOLD + GAP)
        proxy.hold(0)

    async def watcher() -> None:
        while not done.is_set():
            for key in KEYS:
                token = await token_at(key)
                if token is not None:
                    watch.seen[key].append(token)

    faults, watching = asyncio.create_task(path_faults()), asyncio.create_task(watcher())
    await asyncio.gather(*(client() for _ in range(WORKERS)))
    done.set()
    await asyncio.gather(faults, watching)
    async with session.get(f"{a.url}/metrics") as scraped:
        metrics = await scraped.text()
    return Race(ops, outcomes, watch, metrics)
