"""The soak's unfaulted wrk burst: the two gateways' fenced PUT/s, the rate the load under faults is
held to.

One wrk per replica, half the connections each, as `fencegate bench` drives
two replicas; a first second, not counted, has each gateway learn the token
source's bound for the burst's 1,024 resources (one ZooKeeper read each), as
a running one has. Fresh keys and token 1: no answer but a 2xx is expected.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from fencegate.bench.wrk import run_wrk

log = logging.getLogger("soak")

BENCH_CONNECTIONS = 32  # wrk connections of the burst, as in `fencegate bench`
BENCH_WARMUP = 1.0  # seconds of wrk before the burst, not counted


async def wrk_burst(
    urls: list[str], *, seconds: float, api_key: str, workdir: Path, prefix: str
) -> tuple[float, int]:
    """The gateways' fenced PUT/s over `seconds` after the warm-up, and the non-2xx answers of both."""
    rate, refused = 0.0, 0
    for length, label in ((BENCH_WARMUP, "warm-up"), (seconds, "burst")):
        results = await asyncio.gather(
            *(
                asyncio.to_thread(
                    run_wrk,
                    url,
                    seconds=length,
                    connections=BENCH_CONNECTIONS // len(urls),
                    workdir=_wrk_dir(workdir, i),
                    prefix=f"{prefix}{label}{i}-",
                    resource_prefix=f"{prefix}bench-",
                    api_key=api_key,
                )
                for i, url in enumerate(urls)
            )
        )
        log.info("wrk %s: %s", label, results)
        rate = sum(r.requests_per_s for r in results)
        refused += sum(r.non_2xx for r in results)
    return rate, refused


def _wrk_dir(workdir: Path, replica: int) -> Path:
    path = workdir / f"wrk-{replica}"
    path.mkdir(exist_ok=True)
    return path
