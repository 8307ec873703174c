"""The recorded versions of an http upstream, and what an ETag the gateway never recorded is taken to hold.

Real servers: the HTTP store as a process (`tests.gateway.etag_upstream`) and
the gateway's own SQLite database, migrated as `serve` migrates it. A write
around the gateway is a plain PUT straight to the store.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.contexts import migrate_storage
from gateway.http_transport import HttpTransport
from gateway.storage_tls import open_storage
from gateway.transport import RESOURCE, TOKEN, VersionChanged
from storage.models import UpstreamVersion
from storage.upstream_versions import Recorded, forget, intend, lookup, record
from tests.gateway.etag_upstream import started


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    url = f"sqlite:///{tmp_path / 'versions.db'}"
    await migrate_storage(url)
    opened = open_storage(url)
    yield opened
    await opened.dispose()


async def _rows(engine: AsyncEngine, key: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).where(UpstreamVersion.key == key))).scalar_one())


async def test_an_etag_is_found_exactly_an_unrecorded_one_is_bounded_and_a_new_key_is_unknown(
    engine: AsyncEngine,
) -> None:
    assert await lookup(engine, key="k", etag='"1"') is None  # never written through the gateway
    first = await intend(engine, key="k", token=5, resource="r", tombstone=False)
    await record(engine, first, key="k", etag='"1"', token=5)
    assert await lookup(engine, key="k", etag='"1"') == Recorded(5, "r", False, exact=True)
    await intend(engine, key="k", token=9, resource="r", tombstone=False)  # sent, answer not recorded
    assert await lookup(engine, key="k", etag='"2"') == Recorded(9, "r", False, exact=False)


async def test_a_recorded_write_drops_the_rows_it_outranks_and_a_refused_one_leaves_none(
    engine: AsyncEngine,
) -> None:
    rows = [await intend(engine, key="k", token=t, resource="r", tombstone=False) for t in (3, 4, 8)]
    newer = await intend(engine, key="k", token=6, resource="r", tombstone=True)
    await record(engine, newer, key="k", etag='"6"', token=6)
    assert await _rows(engine, "k") == 2  # its own, and token 8's (above it: it still bounds the key)
    await forget(engine, rows[2])
    assert await lookup(engine, key="k", etag='"6"') == Recorded(6, "r", True, exact=True)
    assert await lookup(engine, key="k", etag='"x"') == Recorded(6, "r", False, exact=False)


async def test_a_write_around_the_gateway_is_taken_to_carry_the_highest_recorded_token(
    engine: AsyncEngine,
) -> None:
    meta = {TOKEN: "5", RESOURCE: "r"}
    async with started() as url, aiohttp.ClientSession() as session:
        transport = HttpTransport(session=session, base_url=url, engine=engine, timeout=5.0)
        async with session.put(f"{url}/old", data=b"before the gateway") as answer:
            assert answer.status == 201
        before = await transport.head("old")
        assert before is not None
        assert (before.token, before.resource) == (None, None)  # a key the gateway never wrote
        etag = await transport.put_if("k", b"k token 5", content_type="text/plain", metadata=meta, match=None)
        written = await transport.head("k")
        assert written is not None
        assert (written.etag, written.token, written.resource) == (etag, 5, "r")
        with pytest.raises(VersionChanged):
            await transport.put_if("k", b"again", content_type="text/plain", metadata=meta, match=None)
        async with session.put(f"{url}/k", data=b"around the gateway") as answer:
            assert answer.status == 200
        around = await transport.head("k")
        assert around is not None
        assert around.etag != etag
        assert (around.token, around.resource, around.tombstone) == (5, "r", False)


def test_serve_refuses_an_unreachable_upstream_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fencegate.cli", "serve", "--port", "0", "--data-dir", str(tmp_path),
         "--upstream", "http://127.0.0.1:9/o", "--upstream-ordering", "conditional"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("fencegate serve: upstream http://127.0.0.1:9/o failed the conditional-write "
                           "probe: create: the store's answer: upstream_unavailable (503)"), last  # fmt: skip
    assert "Traceback" not in done.stderr
    assert "listening" not in done.stderr
