"""Light import, honest extras: each token source's driver loads on first use and comes with an extra.

Each check runs in a fresh interpreter, so what it sees imported is what
`import lockclient` really imports. A missing driver is made missing with
`sys.modules[name] = None`, which makes Python's import fail as it does for
a package that is not installed.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lockclient
import lockclient.tokens
from lockclient import TokenSource
from tests.lockclient.processes import ROOT

DRIVERS = {"kazoo", "sqlalchemy", "asyncpg", "aetcd", "grpc", "aiosqlite"}


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_import_lockclient_loads_no_token_source_driver() -> None:
    code = f"import sys, lockclient; print(sorted({{m.split('.')[0] for m in sys.modules}} & {DRIVERS!r}))"
    done = python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_source_loads_its_driver_on_first_use() -> None:
    code = (
        "import sys, lockclient\n"
        "source = lockclient.open_token_source('zookeeper://127.0.0.1:1')\n"
        "print(type(source).__name__, 'kazoo' in sys.modules, 'aetcd' in sys.modules)\n"
        "print(lockclient.EtcdTokens.__name__, 'aetcd' in sys.modules)\n"
    )
    done = python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["ZooKeeperTokens True False", "EtcdTokens True"]


@pytest.mark.parametrize(
    ("url", "name", "driver", "extra"),
    [
        ("zookeeper://127.0.0.1:1", "ZooKeeperTokens", "kazoo", "zookeeper"),
        ("postgresql://u@127.0.0.1:1/db", "PostgresTokens", "asyncpg", "postgresql"),
        ("etcd://127.0.0.1:1", "EtcdTokens", "aetcd", "etcd"),
    ],
)
def test_a_missing_driver_is_an_error_that_names_the_extra(
    url: str, name: str, driver: str, extra: str
) -> None:
    code = (
        f"import sys\nsys.modules[{driver!r}] = None\n"
        "from lockclient import MissingExtra, open_token_source\n"
        f"try:\n    open_token_source({url!r})\n"
        "except MissingExtra as exc:\n    print(exc.extra, exc.name, exc)\n"
        f"try:\n    from lockclient import {name}\n"
        "except ImportError as exc:\n    print(type(exc).__name__)\n"
    )
    done = python(code)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.strip().split("\n")
    assert first.startswith(f"{extra} {driver} ")
    assert f"pip install 'fencegate[{extra}]'" in first
    assert second == "MissingExtra"


def _requirements() -> dict[str | None, set[str]]:
    """The installed distribution's requirements: names by extra (None: the base install)."""
    found: dict[str | None, set[str]] = {}
    for line in importlib.metadata.requires("fencegate") or []:
        name = re.split(r"[\s\[<>=!;~]", line, maxsplit=1)[0].lower()
        extra = re.search(r"extra\s*==\s*['\"]([\w-]+)['\"]", line)
        found.setdefault(extra.group(1) if extra else None, set()).add(name)
    return found


def test_the_base_install_pulls_no_zookeeper_postgresql_or_etcd_driver_and_each_extra_names_its_own() -> None:
    requirements = _requirements()
    assert not requirements[None] & {"kazoo", "asyncpg", "aetcd", "grpcio"}
    assert "kazoo" in requirements["zookeeper"]
    assert "asyncpg" in requirements["postgresql"]  # the gateway's PostgreSQL storage needs it too
    assert "aetcd" in requirements["etcd"]


def test_an_unreachable_zookeeper_fails_within_connect_timeout_and_prints_nothing() -> None:
    """No logging configured, as in a plain script: kazoo's retries must not reach stderr."""
    code = (
        "import asyncio\n"
        "from lockclient import TokenSourceError, ZooKeeperTokens\n"
        "async def main():\n"
        "    async with ZooKeeperTokens('127.0.0.1:1', timeout=60.0, connect_timeout=0.5) as source:\n"
        "        async with asyncio.timeout(20):  # the draw deadline is 60 s: connect_timeout must win\n"
        "            try:\n"
        "                await source.next_token('r')\n"
        "            except TokenSourceError as exc:\n"
        "                print(exc.source)\n"
        "asyncio.run(main())\n"
    )
    done = python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "zookeeper"
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("driver", "modules"),
    [
        ("kazoo", ["tokens/zookeeper.py"]),
        ("aetcd", ["tokens/etcd.py"]),
        ("asyncpg", ["tokens/postgres.py"]),
        # and lockclient.sql, which fences the user's own SQLAlchemy connection
        ("sqlalchemy", ["sql/_fence.py", "sql/_marks.py", "tokens/postgres.py"]),
    ],
)
def test_each_driver_is_imported_by_its_source_module_only(driver: str, modules: list[str]) -> None:
    root = Path(lockclient.__file__).parent
    users = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if re.search(rf"^\s*(import|from) {driver}\b", p.read_text(), re.MULTILINE)
    )
    assert users == modules


def test_every_source_class_is_a_token_source() -> None:
    for name in lockclient.tokens.SOURCES:
        assert issubclass(getattr(lockclient, name), TokenSource), name
