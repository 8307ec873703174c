"""Starts K client processes, serves their checkpoints, and collects one history.

`Runner.run(configs, on_checkpoint=...)` spawns `python -m fencegate.lab.client` per
client (each its own OS process and session, so SIGSTOP reaches it and only
it), reads each client's checkpoint lines, lets the scenario act at each one
(pause the holder, hold its write in the proxy, jump a clock, restart a node)
and then answers go. When every client has exited it merges the per-process
event files, plus the lab's own fault events, into a `History`.

One way out: whatever happens (a client crash, the deadline, cancellation),
every client still running is resumed and killed, and reaped, before `run`
returns or raises. Nothing is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fencegate.lab.client import ClientConfig
from fencegate.lab.errors import RunnerError
from fencegate.lab.history import Event, EventLog, History, Meta, read_events

RUN_DEADLINE = 120.0  # a run longer than this is hung; every client is killed
POLL = 0.01
STDERR_TAIL = 2000


@dataclass(frozen=True)
class Checkpoint:
    """A client stopped at a checkpoint the scenario asked for."""

    client: str
    point: str
    iteration: int
    lease: str


class ClientProcess:
    """One running client: its process, and the signals a scenario may send it."""

    def __init__(self, config: ClientConfig, proc: asyncio.subprocess.Process, stderr: Path) -> None:
        self.config = config
        self.proc = proc
        self.stderr = stderr

    @property
    def name(self) -> str:
        return self.config.settings.client

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """SIGSTOP: the whole process freezes, as in a stop-the-world GC pause."""
        self._signal(signal.SIGSTOP)

    def cont(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def stderr_tail(self) -> str:
        try:
            return self.stderr.read_text(errors="replace")[-STDERR_TAIL:]
        except OSError:
            return ""


async def _first_failure(work: Sequence[Awaitable[None]]) -> None:
    """Await all of `work`; on the first failure cancel the rest and raise it: one client down ends a run."""
    tasks = [asyncio.ensure_future(w) for w in work]
    if not tasks:
        return
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            error = task.exception()
            if error is not None:
                raise error
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


OnCheckpoint = Callable[["Runner", ClientProcess, Checkpoint], Awaitable[None]]


class Runner:
    """Runs one lab run's clients in `workdir` (event files, configs, stderr logs)."""

    def __init__(
        self,
        workdir: Path | str,
        *,
        python: str = sys.executable,
        deadline: float = RUN_DEADLINE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._python = python
        self._deadline = deadline
        self._clock = clock
        self._lab_events = self.workdir / "lab.jsonl"
        self.clients: dict[str, ClientProcess] = {}
        self._background: set[asyncio.Task[None]] = set()

    # -- what a scenario uses -------------------------------------------------

    def note(self, kind: str, client: str, detail: str, *, lease: str | None = None) -> Event:
        """Record a fault the lab injected (kind "pause", "resume", "fault" or "expire")."""
        with EventLog(self._lab_events) as log:  # opened per note: faults are rare, and nothing stays open
            return log.record(Event(self._clock(), client, kind, lease, None, "ok", detail=detail))

    def events(self) -> list[Event]:
        """Every client event recorded so far, in time order (for a scenario's conditions)."""
        merged = [e for c in self.clients.values() for e in read_events(c.config.events)]
        return sorted(merged, key=lambda e: e.at)

    async def wait_for(self, condition: Callable[[list[Event]], bool], *, within: float, what: str) -> None:
        """Poll the recorded events until `condition` holds; RunnerError past `within` seconds."""
        end = self._clock() + within
        while not condition(self.events()):
            if self._clock() >= end:
                raise RunnerError(f"timed out after {within:.1f}s waiting for {what}", client="lab")
            await asyncio.sleep(POLL)

    def background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` beside the clients (e.g. undo a fault later); the run waits for it and re-raises."""
        self._background.add(asyncio.create_task(work))

    # -- running --------------------------------------------------------------

    async def run(
        self, configs: Sequence[ClientConfig], *, meta: Meta, on_checkpoint: OnCheckpoint | None = None
    ) -> History:
        """Start every client, serve checkpoints, wait for all; the history without its final value."""
        try:
            for config in configs:
                self.clients[config.settings.client] = await self._spawn(config)
            async with asyncio.timeout(self._deadline):
                await _first_failure([self._serve(c, on_checkpoint) for c in self.clients.values()])
                await _first_failure(list(self._background))
        except TimeoutError as exc:
            raise RunnerError(f"the run did not finish within {self._deadline:.0f}s", client="lab") from exc
        finally:
            for task in self._background:
                task.cancel()
            await asyncio.gather(*self._background, return_exceptions=True)
            await asyncio.shield(self._kill_all())
        files = [c.config.events for c in self.clients.values()]
        if self._lab_events.exists():
            files.append(str(self._lab_events))
        return History.merge(files, meta=meta)

    def _prepare(self, config: ClientConfig) -> tuple[Path, Path]:
        """Write the client's config and create its event file (small local files: no thread needed)."""
        name = config.settings.client
        path = self.workdir / f"{name}.config.json"
        path.write_text(json.dumps(config.to_json()))
        Path(config.events).touch()
        return path, self.workdir / f"{name}.stderr"

    async def _spawn(self, config: ClientConfig) -> ClientProcess:
        path, stderr = self._prepare(config)
        with stderr.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                self._python, "-m", "fencegate.lab.client", str(path),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                start_new_session=True, env={**os.environ, **config.env},
            )  # fmt: skip
        return ClientProcess(config, proc, stderr)

    async def _serve(self, client: ClientProcess, on_checkpoint: OnCheckpoint | None) -> None:
        proc = client.proc
        assert proc.stdout is not None
        assert proc.stdin is not None
        while line := await proc.stdout.readline():
            try:
                data = json.loads(line)
                checkpoint = Checkpoint(
                    client.name, data["checkpoint"], int(data["iteration"]), data["lease"]
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise RunnerError(f"spoke out of protocol: {line!r}", client=client.name) from exc
            if on_checkpoint is not None:
                await on_checkpoint(self, client, checkpoint)
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        code = await proc.wait()
        if code != 0:
            raise RunnerError(f"exited with status {code}", client=client.name, log=client.stderr_tail())

    async def _kill_all(self) -> None:
        for client in self.clients.values():
            if client.proc.returncode is None:
                client.cont()  # a stopped process still dies of SIGKILL; SIGCONT keeps its state sane
                with contextlib.suppress(ProcessLookupError):
                    client.proc.kill()
            if client.proc.stdin is not None:
                client.proc.stdin.close()
            await client.proc.wait()
