"""`fencegate lock inspect|force-unlock`, run as a user runs them, against real masters (TLS ones too)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fencegate.cli import UNAVAILABLE, USAGE
from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import Redlock, SQLiteTokens
from tests.waiting import eventually

Factory = Callable[[ClusterSpec], LocalCluster]


def run(*argv: str) -> tuple[int, str, list[str]]:
    """The real command: its exit code, stdout and stderr lines."""
    done = subprocess.run(
        [sys.executable, "-m", "fencegate.cli", *argv],
        capture_output=True, text=True, timeout=120, env=dict(os.environ), check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr.splitlines()


async def lock_cli(*argv: str) -> tuple[int, str, list[str]]:
    return await asyncio.to_thread(run, "lock", *argv)


def resource() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def masters(redis_cluster: LocalCluster) -> str:
    return ",".join(redis_cluster.redis_urls)


async def test_inspect_a_free_then_a_held_lock_in_lines_and_in_json(
    masters: str, redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    name = resource()
    code, out, err = await lock_cli("inspect", "--masters", masters, name)
    lines = out.splitlines()
    assert (code, err, lines[0]) == (0, [], f"{name}: free (quorum 3)")
    assert lines[1:] == [f"  {url}: free" for url in redis_cluster.redis_urls]

    async with (
        Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(tmp_path / "t.db")) as locker,
        locker.lock(name, ttl=60.0) as lease,
    ):
        await eventually(lambda: set(lease.nodes.values()) == {"ok"})
        code, out, err = await lock_cli("inspect", "--masters", masters, name, "--json")
        assert (code, err) == (0, [])
        state: dict[str, Any] = json.loads(out)
        assert {k: state[k] for k in ("resource", "held", "token", "holding", "quorum")} == {
            "resource": name, "held": True, "token": lease.token, "holding": 5, "quorum": 3,
        }  # fmt: skip
        assert state["key"] == locker.key(name)
        assert 0 < state["ttl_s"] <= 60.0
        assert [m["master"] for m in state["masters"]] == redis_cluster.redis_urls
        assert all(m["answered"] and m["holder"] and m["token"] == lease.token for m in state["masters"])
        assert lease.value.partition(":")[2] not in out  # the holder's secret part is not printed

        code, out, _ = await lock_cli("inspect", "--masters", masters, name)
        assert out.splitlines()[0].startswith(f"{name}: held by token {lease.token} on 5 of 5 masters")


async def test_force_unlock_needs_yes_then_frees_the_lock_for_another_client(
    masters: str, redis_cluster: LocalCluster
) -> None:
    name = resource()
    async with Redlock(redis_cluster.redis_urls) as locker:
        lease = await locker.acquire(name, ttl=60.0)
        await eventually(lambda: set(lease.nodes.values()) == {"ok"})
        code, out, err = await lock_cli("force-unlock", "--masters", masters, name)
        assert (code, out, len(err)) == (USAGE, "", 1)
        assert err[0].startswith("fencegate lock force-unlock: force-unlock deletes the lock on")
        assert err[0].endswith("add --yes if that is meant")
        assert (await locker.inspect(name)).held is True  # refused: nothing changed

        code, out, err = await lock_cli("force-unlock", "--masters", masters, "--yes", name, "--json")
        assert (code, err) == (0, [])
        forced = json.loads(out)
        assert (forced["deleted"], forced["tokens"], forced["unreachable"]) == (5, [], [])
        taken = await locker.acquire(name, ttl=10.0, blocking=False)  # free now
        await locker.release(taken)

        code, out, err = await lock_cli("force-unlock", "--masters", masters, "--yes", name)
        assert (code, err) == (0, [])
        assert out.splitlines()[0] == f"{name}: deleted on 0 of 5 masters (tokens: -)"


async def test_force_unlock_of_a_token_that_no_longer_holds_exits_1_and_keeps_the_lock(
    masters: str, redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    name = resource()
    async with Redlock(redis_cluster.redis_urls, tokens=SQLiteTokens(tmp_path / "t.db")) as locker:
        earlier = await locker.acquire(name, ttl=60.0)
        await locker.release(earlier)
        lease = await locker.acquire(name, ttl=60.0)
        await eventually(lambda: set(lease.nodes.values()) == {"ok"})
        older = str(earlier.token)  # a real token (>= 1) that no longer holds
        code, out, err = await lock_cli("force-unlock", "--masters", masters, "--yes", "--token", older, name)
        assert (code, len(err)) == (1, 1)
        assert err[0] == (
            f"fencegate lock force-unlock: {name!r} is held by another holder than token {older} on 5 "
            "master(s), whose lock was kept; run `inspect` again"
        )
        assert (await locker.inspect(name)).token == lease.token
        code, out, err = await lock_cli(
            "force-unlock", "--masters", masters, "--yes", "--token", str(lease.token), name, "--json"
        )
        assert (code, err) == (0, [])
        assert (json.loads(out)["deleted"], json.loads(out)["kept"]) == (5, [])


@pytest.mark.parametrize("action", [["inspect"], ["force-unlock", "--yes"]])
def test_an_unreachable_master_is_one_line_and_exit_3(action: list[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        down = f"redis://127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refused
        code, out, err = run("lock", *action, "--masters", down, "x", "--json")
    assert (code, len(err)) == (UNAVAILABLE, 1)
    assert f"1 of 1 masters did not answer ({down}; e.g. ConnectionRefusedError" in err[0]
    assert "start them or fix the network to them" in err[0]
    assert json.loads(out)["masters"][0]["answered"] is False  # what was seen is still printed


@pytest.mark.parametrize(
    ("masters", "message"),
    [("not-a-url", "master 'not-a-url': it is not a Redis URL"),
     ("redis://127.0.0.1:1,redis://127.0.0.1:1", "name the same Redis server")],
)  # fmt: skip
def test_bad_masters_are_refused_with_exit_2(masters: str, message: str) -> None:
    code, out, err = run("lock", "inspect", "--masters", masters, "x")
    assert (code, out, len(err)) == (USAGE, "", 1)
    assert message in err[0]


async def test_tls_masters_are_reached_by_their_rediss_urls(cluster_factory: Factory) -> None:
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=3, redis_tls=True))
    urls = cluster.redis_urls
    assert all(url.startswith("rediss://") for url in urls)
    name = resource()
    async with Redlock(urls) as locker:
        lease = await locker.acquire(name, ttl=60.0)
        await eventually(lambda: set(lease.nodes.values()) == {"ok"})
        code, out, err = await lock_cli("inspect", "--masters", ",".join(urls), name, "--json")
        assert (code, err, json.loads(out)["holding"]) == (0, [], 3)
        assert cluster.tls_login[1] not in out  # masters are named without their password
        code, out, err = await lock_cli("force-unlock", "--masters", ",".join(urls), "--yes", name, "--json")
        assert (code, err, json.loads(out)["deleted"]) == (0, [], 3)
        assert (await locker.inspect(name)).held is False
