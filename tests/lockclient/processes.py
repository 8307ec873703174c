"""Run helper modules as separate Python processes and read back what they recorded."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def run_all(module: str, outs: list[Path], *args: str, within: float = 120.0) -> list[list[list[int]]]:
    """Start one process per output file at once, wait for all, return each one's JSON lines."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-W", "error", "-m", module, str(out), *args,
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        for out in outs
    ]  # fmt: skip
    async with asyncio.timeout(within):
        results = [await proc.communicate() for proc in procs]
    for proc, (_, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err.decode()
    return [[json.loads(line) for line in out.read_text().splitlines()] for out in outs]
