"""A process that draws tokens for the token-order tests.

Run as `python -m tests.lockclient._draw_tokens OUT URL RESOURCE COUNT [TASKS [RESOURCES]]`:
TASKS concurrent tasks (default 1) each draw COUNT tokens one after another,
task i for resource `RESOURCE-(i % RESOURCES)` (just RESOURCE when RESOURCES
is 1). Each draw is recorded as JSON lines
`[before_ns, after_ns, token, task, resource_index]` on CLOCK_MONOTONIC.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from lockclient import open_token_source


def resource_name(resource: str, index: int, resources: int) -> str:
    return resource if resources == 1 else f"{resource}-{index}"


async def draw(url: str, resource: str, count: int, tasks: int = 1, resources: int = 1) -> list[list[int]]:
    source = open_token_source(url, allow_unsafe=url.startswith("redis"))
    draws: list[list[int]] = []

    async def task(number: int) -> None:
        index = number % resources
        name = resource_name(resource, index, resources)
        for _ in range(count):
            before = time.monotonic_ns()
            token = await source.next_token(name)
            draws.append([before, time.monotonic_ns(), token, number, index])

    try:
        await asyncio.gather(*(task(number) for number in range(tasks)))
    finally:
        await source.aclose()
    return draws


def main() -> None:
    out, url, resource, count, *more = sys.argv[1:]
    tasks, resources = (int(more[0]) if more else 1), (int(more[1]) if len(more) > 1 else 1)
    draws = asyncio.run(draw(url, resource, int(count), tasks, resources))
    with open(out, "w") as file:
        file.writelines(json.dumps(d) + "\n" for d in draws)


if __name__ == "__main__":
    main()
