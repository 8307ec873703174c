"""Yardstick servers for the gateway benchmark, run as `python -m bench.baseline`.

`memory`: an aiohttp PUT handler that stores into a dict (the HTTP ceiling).
`naive`: the same handler with one durable SQLite transaction per request
(WAL, synchronous=FULL) and no fence: what a careful first version costs.
Both listen on 127.0.0.1 on the port given, on uvloop like the gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from pathlib import Path

import uvloop
from aiohttp import web

SCHEMA = "CREATE TABLE IF NOT EXISTS objects (key TEXT PRIMARY KEY, data BLOB NOT NULL)"


def memory_app() -> web.Application:
    store: dict[str, bytes] = {}

    async def put(request: web.Request) -> web.Response:
        store[request.match_info["key"]] = await request.read()
        return web.json_response({"key": request.match_info["key"]}, status=201)

    app = web.Application()
    app.router.add_put("/v1/objects/{key}", put)
    return app


def naive_app(path: Path) -> web.Application:
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
    parser.add_argument("kind", choices=["memory", "naive"])
    parser.add_argument("--port", type=int, required=True, help="port to listen on (127.0.0.1)")
    parser.add_argument("--db", type=Path, default=Path("naive.db"), help="SQLite file for `naive`")
    args = parser.parse_args()
    app = memory_app() if args.kind == "memory" else naive_app(args.db)
    # the gateway's own default loop, so that the comparison is of the servers, not of their loops
    loop = uvloop.new_event_loop()
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None, loop=loop)


if __name__ == "__main__":
    main()
