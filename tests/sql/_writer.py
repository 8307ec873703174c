"""One writer process of the concurrency test: transactions on one user table, stale and fresh tokens.

    python -m tests.sql._writer OUT URL MODE ISOLATION TOKENS SEED ROUNDS

Each round draws a fresh token from the shared SQLite token source, sometimes sends an older one
instead (a writer that paused), and runs one transaction on `counters` that first records the attempt
in `history`, then writes the counter's row: through `fence()` (MODE call), relying on the trigger
(MODE trigger), or with a read-check-write of the row's token (MODE naive: the race users write by
hand, with a pause between the read and the write, so the race shows). A retryable failure
(serialization, deadlock, SQLite's lock) runs the same attempt again. Every attempt's outcome is
written to OUT as a JSON line.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from lockclient.errors import StaleToken
from lockclient.sql import STALE_SQLSTATE, fence
from lockclient.tokens import SQLiteTokens

RESOURCES = ("acct/0", "acct/1")
RETRYABLE = {"40001", "40P01"}  # serialization failure, deadlock detected
NAIVE_PAUSE = 0.01  # seconds between the naive read and its write
STALE_SHARE = 0.4
MAX_RETRIES = 200


class Refused(Exception):
    """The write was refused as stale."""


def retryable(exc: DBAPIError) -> bool:
    return getattr(exc.orig, "sqlstate", None) in RETRYABLE or "database is locked" in str(exc.orig)


def refused(exc: DBAPIError) -> bool:
    return getattr(exc.orig, "sqlstate", None) == STALE_SQLSTATE or "fencegate_stale_token" in str(exc.orig)


async def transaction(conn: AsyncConnection, mode: str, resource: str, token: int, attempt: str) -> None:
    params = {"resource": resource, "token": token, "attempt": attempt}
    if mode == "naive":
        current = await conn.scalar(text("SELECT token FROM counters WHERE resource = :resource"), params)
        if token < current:
            raise Refused
        await asyncio.sleep(NAIVE_PAUSE)
    await conn.execute(
        text("INSERT INTO history (attempt, resource, token) VALUES (:attempt, :resource, :token)"), params
    )
    if mode == "call":
        await fence(conn, resource, token)
    seq = await conn.scalar(
        text("UPDATE counters SET seq = seq + 1, token = :token WHERE resource = :resource RETURNING seq"),
        params,
    )
    await conn.execute(text("UPDATE history SET seq = :seq WHERE attempt = :attempt"), params | {"seq": seq})


async def one(engine: AsyncEngine, mode: str, resource: str, token: int, attempt: str) -> tuple[str, int]:
    for retries in range(MAX_RETRIES):
        try:
            async with engine.begin() as conn:
                await transaction(conn, mode, resource, token, attempt)
        except (StaleToken, Refused):
            return "refused", retries
        except DBAPIError as exc:
            if refused(exc):
                return "refused", retries
            if not retryable(exc):
                raise
            await asyncio.sleep(random.uniform(0, 0.005))
            continue
        return "committed", retries
    raise AssertionError(f"{attempt}: still failing after {MAX_RETRIES} retries")


async def main(
    out: Path, url: str, mode: str, isolation: str, tokens_path: str, seed: int, rounds: int
) -> None:
    rng = random.Random(seed)
    options = {} if isolation == "-" else {"isolation_level": isolation}
    engine = create_async_engine(url, **options)
    tokens = SQLiteTokens(tokens_path)
    lines = []
    try:
        for n in range(rounds):
            resource = rng.choice(RESOURCES)
            fresh = await tokens.next_token(resource)
            token = max(1, fresh - rng.randint(1, 12)) if rng.random() < STALE_SHARE else fresh
            attempt = f"{seed}-{n}"
            outcome, retries = await one(engine, mode, resource, token, attempt)
            lines.append(
                {
                    "attempt": attempt,
                    "resource": resource,
                    "token": token,
                    "outcome": outcome,
                    "retries": retries,
                }
            )
    finally:
        await tokens.aclose()
        await engine.dispose()
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))  # noqa: ASYNC240 - once, at the end


if __name__ == "__main__":
    path, url, mode, isolation, tokens_path, seed, rounds = sys.argv[1:]
    asyncio.run(main(Path(path), url, mode, isolation, tokens_path, int(seed), int(rounds)))
