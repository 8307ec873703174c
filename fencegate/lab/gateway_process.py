"""A real `fencegate serve` process for the lab: started on a free port, stopped, nothing left behind.

The lab's store is the gateway exactly as a user runs it (SQLite storage, the
embedded default, in the lab's own directory), in its own OS process, so a
client's request crosses a real socket and a real HTTP server. Start waits
on `/readyz` with a deadline; stop sends SIGTERM, waits, and SIGKILLs a
gateway that does not stop in time. `running()` does both whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import aiohttp

from fencegate.lab.cluster.servers import free_port
from fencegate.lab.errors import StoreError

START_DEADLINE = 30.0  # a gateway not ready in this long failed to start (its log says why)
STOP_GRACE = 10.0
POLL = 0.05
LOG_TAIL = 2000


class AsyncGatewayProcess:
    """One `fencegate serve` on loopback, its SQLite file under `data_dir`.

    `args` are more `serve` flags (another storage, an upstream), `env` its whole environment (None: this
    process's; an upstream's credentials), `module` what `python -m` runs (the lab's unconditional proxy).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        python: str = sys.executable,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        module: str = "fencegate.cli",
    ) -> None:
        self.data_dir = data_dir
        self._args = tuple(args)
        self._env = None if env is None else dict(env)
        self._module = module
        self.port = 0
        self.pid: int | None = None
        self._python = python
        self._proc: asyncio.subprocess.Process | None = None
        self._log = data_dir / "gateway.log"

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        with self._log.open("ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                self._python, "-m", self._module, "serve",
                "--host", "127.0.0.1", "--port", str(self.port), "--data-dir", str(self.data_dir),
                *self._args, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, env=self._env,
            )  # fmt: skip
        self.pid = self._proc.pid
        await self._wait_ready()

    async def _wait_ready(self) -> None:
        assert self._proc is not None
        end = time.monotonic() + START_DEADLINE
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as session:
            while time.monotonic() < end:
                if self._proc.returncode is not None:
                    break
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(self.url + "/readyz") as resp:
                        if resp.status == 200:
                            return
                await asyncio.sleep(POLL)
        await self.stop()
        raise StoreError(
            f"the lab's gateway did not become ready on port {self.port}; its log:\n{self.tail()}"
        )

    def tail(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-LOG_TAIL:]
        except OSError:
            return ""

    async def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            async with asyncio.timeout(STOP_GRACE):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def running(data_dir: Path) -> AsyncIterator[AsyncGatewayProcess]:
    """A started gateway, stopped on the way out whatever happened."""
    gateway = AsyncGatewayProcess(data_dir)
    try:
        await gateway.start()
        yield gateway
    finally:
        await asyncio.shield(gateway.stop())


__all__ = ["AsyncGatewayProcess", "running"]
