"""The token-from-the-future guard under a flood, on a real `fencegate serve --tokens` process.

Mallory holds a valid write key for the shared resource and floods it with
token 2^62 (and with the source's bound + 1) while honest clients keep
drawing tokens from the same source and writing. The mark must never move
past what the source issued, every honest write must be accepted, and the
audit trail must show the refusals and verify clean.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import aiohttp
import pytest

from fencegate.cli import main
from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.gateway import GatewayProcess
from lockclient import open_token_source
from lockclient.protocols import TokenSource

HOSTILE = 2**62
HONEST_CLIENTS = 4
HONEST_WRITES = 10  # per honest client
ATTACKS = 200


@pytest.fixture(params=["sqlite", "postgresql"])
def tokens_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tokens.db'}"
    cluster: LocalCluster = request.getfixturevalue("postgres_cluster")
    return cluster.postgres_dsn


@pytest.fixture
def secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    path = tmp_path / "keys.json"
    found = {}
    for name in ("alice", "mallory"):
        assert main(["keys", "--file", str(path), "add", name, "--prefix", "shared/"]) == 0
        found[name] = capsys.readouterr().out.strip()
    return found


async def test_a_valid_key_sending_2_62_does_not_move_the_mark_and_honest_clients_keep_writing(
    tmp_path: Path, tokens_url: str, secrets: dict[str, str]
) -> None:
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    gateway = GatewayProcess(
        tmp_path / "gw.log",
        *("--storage", storage, "--tokens", tokens_url, "--api-keys", str(tmp_path / "keys.json")),
    )
    url = gateway.start()
    resource = f"shared/{uuid.uuid4().hex[:8]}"
    source: TokenSource = open_token_source(tokens_url)
    honest_statuses: list[int] = []
    attack_statuses: list[tuple[int, str]] = []
    try:
        async with aiohttp.ClientSession() as session:
            lease = asyncio.Lock()  # the honest clients take turns, as lease holders do

            async def honest(client: int) -> None:
                auth = {"Authorization": f"Bearer {secrets['alice']}", "Fencing-Resource": resource}
                for i in range(HONEST_WRITES):
                    async with lease:
                        token = await source.next_token(resource)
                        async with session.put(
                            f"{url}/v1/objects/{resource}/c{client}/{i}",
                            data=b"honest",
                            headers={**auth, "Fencing-Token": str(token)},
                        ) as resp:
                            honest_statuses.append(resp.status)

            async def mallory() -> None:
                auth = {"Authorization": f"Bearer {secrets['mallory']}", "Fencing-Resource": resource}
                for i in range(ATTACKS):
                    token = HOSTILE if i % 2 else await source.upper_bound(resource) + 1_000_000
                    async with session.put(
                        f"{url}/v1/objects/{resource}/evil",
                        data=b"evil",
                        headers={**auth, "Fencing-Token": str(token)},
                    ) as resp:
                        attack_statuses.append((resp.status, (await resp.json())["error"]))

            await asyncio.gather(mallory(), *(honest(c) for c in range(HONEST_CLIENTS)))
            async with session.get(
                f"{url}/v1/fences/{resource}", headers={"Authorization": f"Bearer {secrets['alice']}"}
            ) as resp:
                mark = (await resp.json())["highest"]
            bound = await source.upper_bound(resource)
            # After the attack an honest client with a fresh token is still accepted.
            fresh = await source.next_token(resource)
            async with session.put(
                f"{url}/v1/objects/{resource}/after",
                data=b"ok",
                headers={
                    "Authorization": f"Bearer {secrets['alice']}",
                    "Fencing-Resource": resource,
                    "Fencing-Token": str(fresh),
                },
            ) as resp:
                assert resp.status == 201
            async with session.get(
                f"{url}/v1/objects/{resource}/evil", headers={"Authorization": f"Bearer {secrets['alice']}"}
            ) as resp:
                assert resp.status == 404  # no hostile write ever landed
    finally:
        await source.aclose()
        gateway.stop()
    assert set(attack_statuses) == {(422, "token_from_the_future")}
    assert len(attack_statuses) == ATTACKS
    assert 0 < mark <= bound < HOSTILE
    assert honest_statuses == [201] * (HONEST_CLIENTS * HONEST_WRITES)
    assert await asyncio.to_thread(main, ["audit", "verify", "--storage", storage]) == 0
