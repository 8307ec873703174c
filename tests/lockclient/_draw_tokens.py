"""A process that draws tokens for the token-order tests.

Run as `python -m tests.lockclient._draw_tokens OUT URL RESOURCE COUNT`. Each
draw is recorded as JSON lines `[before_ns, after_ns, token]` on CLOCK_MONOTONIC.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from lockclient import open_token_source


async def draw(url: str, resource: str, count: int) -> list[list[int]]:
    source = open_token_source(url, allow_unsafe=url.startswith("redis"))
    draws = []
    try:
        for _ in range(count):
            before = time.monotonic_ns()
            token = await source.next_token(resource)
            draws.append([before, time.monotonic_ns(), token])
    finally:
        await source.aclose()
    return draws


def main() -> None:
    out, url, resource, count = sys.argv[1:]
    draws = asyncio.run(draw(url, resource, int(count)))
    with open(out, "w") as file:
        file.writelines(json.dumps(d) + "\n" for d in draws)


if __name__ == "__main__":
    main()
