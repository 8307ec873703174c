"""The naive yardstick fences and is durable, or group commit would be compared with less work.

`bench.baseline naive` is the goal's denominator: it must refuse a token
below the mark (409) and keep the accepted value on disk when it answers.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import aiohttp

from fencegate.bench.servers import http_server


async def test_naive_yardstick_refuses_a_stale_token_and_keeps_the_accepted_value(tmp_path: Path) -> None:
    db = tmp_path / "naive.db"
    with http_server(["fencegate.bench.baseline", "naive", "--db", str(db)], tmp_path / "naive.log") as (
        url,
        _pid,
    ):
        async with aiohttp.ClientSession(url) as session:
            statuses = []
            for token, value in ((5, b"five"), (3, b"three"), (5, b"five again"), ("x", b"bad")):
                async with session.put(
                    "/v1/objects/k", data=value, headers={"Fencing-Token": str(token)}
                ) as r:
                    statuses.append(r.status)
    assert statuses == [201, 409, 201, 400]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT data FROM objects WHERE key = 'k'").fetchone() == (b"five again",)
        assert conn.execute("SELECT token FROM fences WHERE resource = 'k'").fetchone() == (5,)
