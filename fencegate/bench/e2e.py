"""The whole stack per operation: lease, fenced write through the gateway, release.

One client, 5 masters, SQLite tokens, the gateway on SQLite (group commit),
next to the lease alone and the write alone, so the table shows what each
part of the round trip costs.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass

from fencegate.bench.env import BenchEnv
from fencegate.bench.runner import Case, UnitOfWork, run_alternating
from fencegate.bench.section import Section
from fencegate.bench.servers import http_server
from lockclient import GatewayClient, Redlock

TTL_S = 10.0


@dataclass
class FencedWrite:
    """lease (optional) + PUT with the lease's token (optional) + release."""

    locker: Redlock[int] | None
    gateway: GatewayClient | None
    key: str
    token: int = 0

    async def __call__(self) -> None:
        if self.locker is None:
            assert self.gateway is not None
            self.token += 1
            await self.gateway.put(self.key, b"x" * 64, token=self.token)
            return
        lease = await self.locker.acquire(self.key, ttl=TTL_S, timeout=5.0)
        if self.gateway is not None:
            await self.gateway.put(self.key, b"x" * 64, lease=lease)
        await self.locker.release(lease)

    async def aclose(self) -> None:
        if self.locker is not None:
            await self.locker.aclose()
        if self.gateway is not None:
            await self.gateway.aclose()


async def _op(env: BenchEnv, url: str, *, lease: bool, write: bool) -> UnitOfWork:
    key = f"e2e-{uuid.uuid4().hex[:8]}"
    locker = Redlock(env.redis_urls[:5], tokens=env.tokens("sqlite")) if lease else None
    if locker is not None:
        await locker.connect()
    return FencedWrite(locker, GatewayClient(url) if write else None, key)


async def e2e(env: BenchEnv) -> Section:
    serve = ["fencegate.cli", "--log-level", "WARNING", "serve", "--data-dir", str(env.workdir / "e2e")]
    with http_server(serve, env.workdir / "e2e.log") as (url, _):
        f = functools.partial
        cases = [
            Case("e2e", "lease + fenced write + release", f(_op, env, url, lease=True, write=True)),
            Case("e2e", "lease + release (SQLite tokens)", f(_op, env, url, lease=True, write=False)),
            Case("e2e", "fenced write alone", f(_op, env, url, lease=False, write=True)),
        ]
        results = await run_alternating(cases, runs=env.runs, ops=env.ops, progress=env.progress)
    return Section(
        "e2e", "one client through the whole stack (5 masters, SQLite tokens and storage)", results
    )
