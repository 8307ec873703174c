"""Adapters that make each peer lock one `UnitOfWork`: acquire then release, uncontended.

Sync peers (pottery's Redlock, redis-py's Lock, python-redis-lock) run on the
calling thread, as their users would run them; async peers run on the loop.
Peers are the `bench` extra, never runtime dependencies, so they are imported
inside each factory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fencegate.bench.minimal import MinimalRedlock
from fencegate.bench.runner import UnitOfWork

TTL_S = 10


@dataclass
class _Call:
    """An `UnitOfWork` from two callables: the unit of work and the clean-up."""

    work: Any
    close: Any

    async def __call__(self) -> None:
        await self.work()

    async def aclose(self) -> None:
        await self.close()


async def _nothing() -> None:
    return None


async def minimal_redlock(urls: list[str], key: str) -> UnitOfWork:
    locker = MinimalRedlock(urls)

    async def work() -> None:
        value = await locker.acquire(key, TTL_S * 1000)
        assert value is not None, "uncontended minimal Redlock failed to acquire"
        await locker.release(key, value)

    return _Call(work, locker.aclose)


async def pottery_redlock(urls: list[str], key: str) -> UnitOfWork:
    import redis
    from pottery import Redlock

    masters = {redis.Redis.from_url(url) for url in urls}
    lock = Redlock(key=key, masters=masters, auto_release_time=TTL_S)

    async def work() -> None:
        assert lock.acquire(), "uncontended pottery Redlock failed to acquire"
        lock.release()

    async def close() -> None:
        for master in masters:
            master.close()

    return _Call(work, close)


async def pottery_aioredlock(urls: list[str], key: str) -> UnitOfWork:
    import redis.asyncio as aredis
    from pottery import AIORedlock

    masters = {aredis.Redis.from_url(url) for url in urls}
    lock = AIORedlock(key=key, masters=masters, auto_release_time=TTL_S)

    async def work() -> None:
        assert await lock.acquire(), "uncontended pottery AIORedlock failed to acquire"
        await lock.release()

    async def close() -> None:
        for master in masters:
            await master.aclose()

    return _Call(work, close)


async def aioredlock(urls: list[str], key: str) -> UnitOfWork:
    from aioredlock import Aioredlock

    manager = Aioredlock([{"host": h, "port": int(p)} for h, p in (_host_port(u) for u in urls)])

    async def work() -> None:
        lock = await manager.lock(key, lock_timeout=TTL_S)
        await manager.unlock(lock)

    return _Call(work, manager.destroy)


async def redis_py_lock(urls: list[str], key: str) -> UnitOfWork:
    import redis

    client = redis.Redis.from_url(urls[0])

    async def work() -> None:
        lock = client.lock(key, timeout=TTL_S)
        assert lock.acquire(blocking=False), "uncontended redis-py Lock failed to acquire"
        lock.release()

    async def close() -> None:
        client.close()

    return _Call(work, close)


async def python_redis_lock(urls: list[str], key: str) -> UnitOfWork:
    import redis
    import redis_lock

    client = redis.Redis.from_url(urls[0])

    async def work() -> None:
        lock = redis_lock.Lock(client, key, expire=TTL_S)
        assert lock.acquire(blocking=False), "uncontended python-redis-lock failed to acquire"
        lock.release()

    async def close() -> None:
        client.close()

    return _Call(work, close)


def _host_port(url: str) -> tuple[str, str]:
    host, port = url.removeprefix("redis://").split(":")
    return host, port
