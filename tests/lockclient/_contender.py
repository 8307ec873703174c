"""A contender process for the mutual-exclusion test: N tasks take one lock until a deadline.

Run as `python -m tests.lockclient._contender OUT URLS TOKENS RESOURCE TASKS SECONDS`.
Each critical section is recorded as JSON lines `[start_ns, end_ns, token, pid, drawn_ns, granted_ns]`
on CLOCK_MONOTONIC, which every process on the machine shares.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from lockclient import Redlock, open_token_source


async def contend(
    urls: list[str], tokens_url: str, resource: str, tasks: int, seconds: float
) -> list[list[int]]:
    sections: list[list[int]] = []
    stop = time.monotonic() + seconds
    async with Redlock(urls, tokens=open_token_source(tokens_url)) as locker:

        async def worker() -> None:
            while time.monotonic() < stop:
                async with locker.lock(resource, ttl=5.0, timeout=30.0) as lease:
                    start = time.monotonic_ns()
                    await asyncio.sleep(0.002)  # the protected work
                    end = time.monotonic_ns()
                    drawn, granted = int(lease.drawn_at * 1e9), int(lease.granted_at * 1e9)
                    sections.append([start, end, lease.token, os.getpid(), drawn, granted])

        await asyncio.gather(*(worker() for _ in range(tasks)))
    return sections


def main() -> None:
    out, urls, tokens_url, resource, tasks, seconds = sys.argv[1:]
    sections = asyncio.run(contend(urls.split(","), tokens_url, resource, int(tasks), float(seconds)))
    with open(out, "w") as file:
        file.writelines(json.dumps(section) + "\n" for section in sections)


if __name__ == "__main__":
    main()
