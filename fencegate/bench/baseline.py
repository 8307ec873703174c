"""Yardstick servers for the gateway benchmark, run as `python -m fencegate.bench.baseline`.

`memory`: an aiohttp PUT handler that stores into a dict (the HTTP ceiling).
`naive`: the fenced PUT written the plain way, the group-commit goal's
yardstick: one durable SQLite transaction per request (WAL,
synchronous=FULL) on aiosqlite, the mark's conditional upsert then the
write, 409 if the token is below the mark. `naive-postgresql`: the same on
PostgreSQL, one transaction per request from an asyncpg pool of the
gateway's size (10), in tables of its own. `unfenced`: a stricter yardstick
with less work, no fence and the whole transaction in one thread hop.
The fenced ones take the resource from `Fencing-Resource`, or the key.
All listen on 127.0.0.1 on the port given, on uvloop like the gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiosqlite
import asyncpg
import uvloop
from aiohttp import web

SCHEMA = "CREATE TABLE IF NOT EXISTS objects (key TEXT PRIMARY KEY, data BLOB NOT NULL)"
FENCES = "CREATE TABLE IF NOT EXISTS fences (resource TEXT PRIMARY KEY, token INTEGER NOT NULL)"
# the gateway's own decision: raise the mark to the token unless the mark is higher; no row back = stale
FENCE = (
    "INSERT INTO fences (resource, token) VALUES (?, ?) ON CONFLICT (resource) DO UPDATE "
    "SET token = excluded.token WHERE fences.token <= excluded.token RETURNING token"
)
DB = web.AppKey("db", aiosqlite.Connection)
POOL = web.AppKey("pool", asyncpg.Pool)
PG_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS naive_objects (key TEXT PRIMARY KEY, data BYTEA NOT NULL)",
    "CREATE TABLE IF NOT EXISTS naive_fences (resource TEXT PRIMARY KEY, token BIGINT NOT NULL)",
)
PG_FENCE = (
    "INSERT INTO naive_fences (resource, token) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE "
    "SET token = excluded.token WHERE naive_fences.token <= excluded.token RETURNING token"
)
PG_WRITE = (
    "INSERT INTO naive_objects (key, data) VALUES ($1, $2) "
    "ON CONFLICT (key) DO UPDATE SET data = excluded.data"
)
POOL_SIZE = 10  # the gateway's own pool size (storage/engine.py)


# the naive servers' transaction: fence and write `data` under `key`; False if the token is stale
Write = Callable[[web.Application, str, str, int, bytes], Awaitable[bool]]


def _fenced_put_app(
    connect: Callable[[web.Application], AsyncIterator[None]], write: Write
) -> web.Application:
    """A PUT handler around `write`: the token (400 if not a number), the resource (the header, or
    the key), then 201, or 409 if the fence refused."""

    async def put(request: web.Request) -> web.Response:
        key = request.match_info["key"]
        try:
            token = int(request.headers["Fencing-Token"])
        except (KeyError, ValueError):
            return web.json_response({"error": "bad_token"}, status=400)
        resource = request.headers.get("Fencing-Resource", key)
        if not await write(request.app, key, resource, token, await request.read()):
            return web.json_response({"error": "stale_token"}, status=409)
        return web.json_response({"key": key, "token": token}, status=201)

    app = web.Application()
    app.cleanup_ctx.append(connect)
    app.router.add_put("/v1/objects/{key}", put)
    return app


def memory_app() -> web.Application:
    store: dict[str, bytes] = {}

    async def put(request: web.Request) -> web.Response:
        store[request.match_info["key"]] = await request.read()
        return web.json_response({"key": request.match_info["key"]}, status=201)

    app = web.Application()
    app.router.add_put("/v1/objects/{key}", put)
    return app


def naive_app(path: Path) -> web.Application:
    """Fence and write in one transaction per request, each statement awaited on aiosqlite."""
    lock = asyncio.Lock()  # one transaction at a time on the one connection

    async def connect(app: web.Application) -> AsyncIterator[None]:
        db = await aiosqlite.connect(path, isolation_level=None)
        for sql in ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", SCHEMA, FENCES):
            await db.execute(sql)
        app[DB] = db
        yield
        await db.close()

    async def write(app: web.Application, key: str, resource: str, token: int, data: bytes) -> bool:
        db = app[DB]
        async with lock:
            await db.execute("BEGIN IMMEDIATE")
            try:
                passed = bool(await db.execute_fetchall(FENCE, (resource, token)))
                if passed:
                    await db.execute("INSERT OR REPLACE INTO objects (key, data) VALUES (?, ?)", (key, data))
                await db.execute("COMMIT")
            except BaseException:
                await db.execute("ROLLBACK")
                raise
        return passed

    return _fenced_put_app(connect, write)


def naive_postgresql_app(dsn: str) -> web.Application:
    """Fence and write in one transaction per request on a pooled asyncpg connection."""

    async def connect(app: web.Application) -> AsyncIterator[None]:
        pool = await asyncpg.create_pool(dsn, min_size=POOL_SIZE, max_size=POOL_SIZE)
        async with pool.acquire() as conn:
            for sql in PG_SCHEMA:
                await conn.execute(sql)
        app[POOL] = pool
        yield
        await pool.close()

    async def write(app: web.Application, key: str, resource: str, token: int, data: bytes) -> bool:
        async with app[POOL].acquire() as conn, conn.transaction():
            if await conn.fetchrow(PG_FENCE, resource, token) is None:
                return False
            await conn.execute(PG_WRITE, key, data)
        return True

    return _fenced_put_app(connect, write)


def unfenced_app(path: Path) -> web.Application:
    """No fence; the whole transaction runs in one hop to a thread."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(SCHEMA)
    lock = asyncio.Lock()

    def write(key: str, data: bytes) -> None:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT OR REPLACE INTO objects (key, data) VALUES (?, ?)", (key, data))
        db.execute("COMMIT")

    async def put(request: web.Request) -> web.Response:
        data = await request.read()
        async with lock:  # one writer at a time, as SQLite allows
            await asyncio.to_thread(write, request.match_info["key"], data)
        return web.json_response({"key": request.match_info["key"]}, status=201)

    app = web.Application()
    app.router.add_put("/v1/objects/{key}", put)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="yardstick PUT servers for `fencegate bench`")
    parser.add_argument("kind", choices=["memory", "naive", "naive-postgresql", "unfenced"])
    parser.add_argument("--port", type=int, required=True, help="port to listen on (127.0.0.1)")
    parser.add_argument("--db", type=Path, default=Path("naive.db"), help="SQLite file of the durable kinds")
    parser.add_argument("--dsn", help="PostgreSQL URL of naive-postgresql (postgresql://...)")
    args = parser.parse_args()
    if args.kind == "naive-postgresql" and not args.dsn:
        parser.error("naive-postgresql needs --dsn postgresql://...")
    if args.kind == "memory":
        app = memory_app()
    elif args.kind == "naive-postgresql":
        app = naive_postgresql_app(args.dsn)
    else:
        app = naive_app(args.db) if args.kind == "naive" else unfenced_app(args.db)
    # the gateway's own default loop, so that the comparison is of the servers, not of their loops
    loop = uvloop.new_event_loop()
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None, loop=loop)


if __name__ == "__main__":
    main()
