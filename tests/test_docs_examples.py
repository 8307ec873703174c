"""Every Python example of README.md, docs/lockclient.md and docs/own-tables.md runs as written, on a
fresh store.

Each ```` ```python ```` block is one test. Its example addresses are replaced
with the session's real servers (`ADDRESSES`); a block that still names an
example host after that fails, as does a block that raises. A block that
cannot run alone is marked ```` ```python fragment ```` and is skipped by that
mark only. Blocks with a top-level `await` run as `python -m asyncio` runs
them. Each block runs in a thread of its own (its `asyncio.run` needs no
running loop) with a fresh gateway and a fresh working directory.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fencegate.lab.cluster import LocalCluster
from gateway import Settings, create_app

ROOT = Path(__file__).parents[1]
DOCUMENTS = ("README.md", "docs/lockclient.md", "docs/own-tables.md")
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<code>.*?)^```\s*$", re.M | re.S)
RUNNABLE, FRAGMENT = "python", "python fragment"
EXAMPLE_HOST = re.compile(r"10\.0\.0\.\d+|//gateway:|/var/lib/app/")


@dataclass(frozen=True)
class Block:
    document: str
    line: int
    info: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.document}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for document in DOCUMENTS:
        text = (ROOT / document).read_text()
        for match in FENCE.finditer(text):
            info = match["info"].strip()
            if info.split(" ")[0] in ("python", "py", "python3", "pycon"):
                line = text.count("\n", 0, match.start()) + 1
                found.append(Block(document, line, info, match["code"]))
    return found


BLOCKS = blocks()


def test_every_python_block_is_runnable_or_marked_a_fragment() -> None:
    assert len([b for b in BLOCKS if b.info == RUNNABLE]) >= 5, [b.name for b in BLOCKS]
    unknown = [(b.name, b.info) for b in BLOCKS if b.info not in (RUNNABLE, FRAGMENT)]
    assert not unknown, f"mark each as ```python (runs) or ```python fragment (skipped): {unknown}"


def _addresses(redis: LocalCluster, zookeeper: LocalCluster, gateway: str, workdir: Path) -> dict[str, str]:
    """Each example address as written in the docs, and the real one the test gives it."""
    replaced = {f"redis://10.0.0.{n}:6379": url for n, url in enumerate(redis.redis_urls, start=1)}
    replaced["zookeeper://10.0.0.7:2181"] = zookeeper.zookeeper_url
    replaced["http://gateway:8080"] = gateway
    replaced["/var/lib/app/"] = f"{workdir}/"
    return replaced


def _run(code: str, workdir: Path) -> str:
    """Run `code` as a module of its own (top-level await allowed); what it printed."""
    compiled = compile(code, "<example>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, Any] = {"__name__": "__example__"}
    printed = io.StringIO()
    with contextlib.chdir(workdir), contextlib.redirect_stdout(printed):
        if compiled.co_flags & inspect.CO_COROUTINE:
            asyncio.run(eval(compiled, namespace))  # noqa: S307 - the repository's own documentation
        else:
            exec(compiled, namespace)  # noqa: S102 - the repository's own documentation
    return printed.getvalue()


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.info == RUNNABLE], ids=lambda b: b.name)
async def test_the_example_runs_as_written(
    block: Block,
    redis_cluster: LocalCluster,
    zookeeper_cluster: LocalCluster,
    aiohttp_client: Any,
    tmp_path: Path,
) -> None:
    served = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gateway")))  # a fresh store
    workdir = tmp_path / "work"
    workdir.mkdir()
    gateway = str(served.server.make_url("")).rstrip("/")
    code = block.code
    for example, real in _addresses(redis_cluster, zookeeper_cluster, gateway, workdir).items():
        code = code.replace(example, real)
    left = EXAMPLE_HOST.findall(code)
    assert not left, f"{block.name} names example addresses the test does not replace: {left}"
    await asyncio.to_thread(_run, code, workdir)


async def test_the_readme_example_reads_what_it_wrote_the_time_before(
    redis_cluster: LocalCluster, zookeeper_cluster: LocalCluster, aiohttp_client: Any, tmp_path: Path
) -> None:
    """On a fresh store the first run finds nothing (NotFound) and writes 1; the second reads it."""
    (readme,) = [b for b in BLOCKS if b.document == "README.md" and b.info == RUNNABLE]
    served = await aiohttp_client(create_app(Settings(data_dir=tmp_path / "gateway")))
    gateway = str(served.server.make_url("")).rstrip("/")
    code = readme.code
    for example, real in _addresses(redis_cluster, zookeeper_cluster, gateway, tmp_path).items():
        code = code.replace(example, real)
    for _ in range(2):
        await asyncio.to_thread(_run, code, tmp_path)
    read = await served.get("/v1/objects/invoices/42")
    assert (read.status, await read.read(), read.headers["Fencing-Resource"]) == (200, b"2", "invoices")
