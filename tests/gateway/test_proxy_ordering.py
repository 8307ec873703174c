"""`--upstream-ordering`: an http(s) upstream is served only under a name that states the risk, and the
one trust-path replica stops forwarding once its claim on the database lapsed.

The refusals are one line and exit 2 before anything is opened. A replica
whose claim another instance took over (as after this one was paused past
its window) answers every fenced request and `/readyz` 503
`replica_claim_lapsed`, sends nothing upstream and raises no mark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from sqlalchemy import update

from fencegate.cli import main
from gateway.config import SQLITE_FILE, Settings
from gateway.errors import BadSetting, Unavailable
from gateway.replica import OneReplica
from gateway.settings_cli import settings_from
from storage import migrate, open_engine
from storage.models import ReplicaClaim
from tests.gateway.conftest import MakeClient
from tests.waiting import eventually

UPSTREAM = "http://127.0.0.1:9/store"


def _serve(tmp_path: Path, *extra: str) -> list[str]:
    return ["serve", "--port", "0", "--data-dir", str(tmp_path / "data"), *extra]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--upstream", UPSTREAM), f"upstream '{UPSTREAM}' applies whatever the gateway forwards, "
         "unconditionally: safe only while the path to it never delays or reorders a request"),
        (("--upstream", "https://u:sekrit@store.test/o"), "upstream 'https://u:***@store.test/o' applies"),
        (("--upstream", UPSTREAM, "--upstream-ordering", "ordered"),
         "--upstream-ordering 'ordered' is not one of conditional, trust-path"),
        (("--upstream-ordering", "trust-path"), "--upstream-ordering trust-path needs proxy mode: give "
         "--upstream URL too"),
        (("--upstream", UPSTREAM, "--upstream-ordering", "trust-path", "--upstream-heartbeat", "0"),
         "upstream_heartbeat must be a positive number of seconds"),
        (("--upstream", "s3://bucket", "--upstream-ordering", "trust-path"),
         "--upstream-ordering trust-path is for an http(s) upstream; an s3:// upstream is "
         "always fenced by the store's conditional writes"),
    ],
    ids=["no-ordering", "no-ordering-masked", "unknown-value", "no-upstream", "zero-heartbeat", "s3"],
)  # fmt: skip
def test_a_missing_or_bad_ordering_is_one_line_and_exit_2_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], message: str
) -> None:
    assert main(_serve(tmp_path, *flags)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fencegate serve: {message}"), err
    assert "\n" not in err
    assert "sekrit" not in err
    assert not (tmp_path / "data").exists()  # refused before the data dir was made


def test_the_refusal_names_the_setting_and_the_safe_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_serve(tmp_path, "--upstream", UPSTREAM)) == 2
    err = capsys.readouterr().err
    assert "give --upstream-ordering trust-path" in err
    assert "or --upstream-ordering conditional if the upstream does conditional PUTs on strong ETags" in err


def test_the_ordering_is_a_setting_from_the_flag_and_the_environment() -> None:
    from fencegate.cli import build_parser

    def parse(*argv: str) -> Any:
        return build_parser(load=("serve",)).parse_args(["serve", *argv])

    env = {"FENCEGATE_UPSTREAM": UPSTREAM, "FENCEGATE_UPSTREAM_ORDERING": "trust-path"}
    assert settings_from(parse(), env).upstream_ordering == "trust-path"
    with pytest.raises(BadSetting, match="give --upstream-ordering trust-path"):
        settings_from(parse(), {"FENCEGATE_UPSTREAM": UPSTREAM})
    assert Settings().upstream_ordering is None  # the default: no proxy, nothing to order


def test_help_shows_the_ordering_its_values_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--upstream-ordering UPSTREAM_ORDERING" in text
    assert "conditional: every write is a PUT conditional on the upstream's strong ETag" in text
    assert "trust-path: the upstream applies writes unconditionally" in text
    assert "(default: unset; env FENCEGATE_UPSTREAM_ORDERING)" in text
    assert "(default: 2.0; env FENCEGATE_UPSTREAM_HEARTBEAT)" in text


async def _nowhere(request: web.Request) -> web.Response:
    raise AssertionError(f"{request.method} {request.path} reached the upstream")


async def test_a_replica_whose_claim_was_taken_over_sends_nothing_and_is_not_ready(
    make_client: MakeClient, aiohttp_server: Any, tmp_path: Path
) -> None:
    upstream = web.Application()
    upstream.router.add_route("*", "/store/{key:.+}", _nowhere)
    server: TestServer = await aiohttp_server(upstream)
    proxy = await make_client(
        upstream=str(server.make_url("/store")), upstream_ordering="trust-path", upstream_heartbeat=0.5
    )
    assert (await proxy.get("/readyz")).status == 200
    engine = open_engine(f"sqlite:///{tmp_path / SQLITE_FILE}")
    try:  # another instance took the slot over, as if this one had been paused past its window
        async with engine.begin() as conn:
            await conn.execute(update(ReplicaClaim).values(instance="another", expires_at=4e9))
    finally:
        await engine.dispose()

    async def lapsed() -> bool:
        answer = await proxy.get("/readyz")
        return answer.status == 503 and (await answer.json())["error"] == "replica_claim_lapsed"

    await eventually(lapsed, within=10.0, what="readyz 503 once the heartbeat found the claim taken")
    put = await proxy.put("/v1/objects/k", data=b"x", headers={"Fencing-Token": "7"})
    assert (put.status, (await put.json())["error"]) == (503, "replica_claim_lapsed")
    assert (await (await proxy.get("/v1/fences/k")).json())["highest"] == 0  # the mark did not move


async def test_a_replica_that_could_not_beat_stops_counting_on_its_claim_before_it_runs_out(
    tmp_path: Path,
) -> None:
    now = [0.0]
    engine = open_engine(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        await migrate(engine)
        replica = OneReplica(engine, period=1.0, clock=lambda: now[0])
        await replica.start()
        replica.check()
        now[0] = replica.window - replica.period - 0.01  # its last beat was at 0: still its own
        replica.check()
        now[0] = replica.window - replica.period  # a period short of when another may take over
        with pytest.raises(Unavailable, match="heartbeat did not reach storage") as refused:
            replica.check()
        assert refused.value.code == "replica_claim_lapsed"
        await replica.aclose()
    finally:
        await engine.dispose()
