"""The timeout case on real SeaweedFS: a write answered 504 lands late and fails its precondition.

One gateway, `--upstream-timeout 0.5`, its path to the store through the
lab's `DelayProxy`: token 5's write is held 1.5 s on the path (504), token 6
goes through on another connection (201), then token 5's bytes reach the
store. SeaweedFS drops a request whose client closed the connection before
it arrived (its HTTP server cancels the handler), so the test then delivers
token 5's write once more as the gateway sent it, precondition and all,
after token 6: a path that delivers it while the connection still lives.
With the preconditions the store refuses it and keeps token 6; without (the
control) it ends with token 5's stale bytes, as the issue found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fencegate.lab.cluster import LocalCluster
from gateway import create_app
from gateway.app_keys import AppKeys
from gateway.transport import VersionChanged
from tests.gateway.conftest import AppClient
from tests.gateway.s3_support import (
    delayed_path,
    delayed_settings,
    direct_client,
    fresh_prefix,
    held,
    use_store,
)
from tests.waiting import eventually

TIMEOUT, HOLD = 0.5, 1.5


@pytest.mark.parametrize("conditional", [True, False], ids=["conditional", "control-without-preconditions"])
async def test_a_write_answered_504_that_lands_late_does_not_overwrite_the_newer_one(
    conditional: bool,
    s3_cluster: LocalCluster,
    aiohttp_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    store, prefix = s3_cluster.s3, fresh_prefix()
    use_store(monkeypatch, store, tmp_path)
    async with delayed_path(store) as proxy:
        app = create_app(delayed_settings(store, prefix, proxy, tmp_path, TIMEOUT))
        app[AppKeys.s3_conditional] = conditional
        gateway: AppClient = await aiohttp_client(app)
        assert (
            await gateway.put("/v1/objects/doc", data=b"v4", headers={"Fencing-Token": "4"})
        ).status == 201
        transport = app[AppKeys.store].transport  # type: ignore[attr-defined]
        checked = await transport.head("doc")  # the version token 5's write is decided against

        await proxy.drop()  # the pool's idle connections are cut: token 5 opens a connection of its own
        proxy.hold(HOLD)
        late = await gateway.put("/v1/objects/doc", data=b"v5-stale", headers={"Fencing-Token": "5"})
        assert late.status == 504
        held_one = proxy.connections - 1
        proxy.hold(HOLD, connection=held_one)  # that connection stays held; new ones pass at once
        proxy.hold(1e-6)
        sent = proxy.forwarded["up"]
        fresh = await gateway.put("/v1/objects/doc", data=b"v6", headers={"Fencing-Token": "6"})
        assert fresh.status in (200, 201), await fresh.text()
        answered = proxy.forwarded["down"]
        assert proxy.forwarded["up"] > sent
        # the store's answer to the late write coming back down the held connection: it was decided
        await eventually(
            lambda: proxy.forwarded["down"] > answered,
            within=HOLD + 10.0, what="the store answering token 5's late write",
        )  # fmt: skip
        metadata = {"fencing-token": "5", "fencing-resource": "doc"}
        late_write = transport.put_if(
            "doc", b"v5-stale", content_type="application/octet-stream", metadata=metadata, match=checked.etag
        )
        if conditional:
            with pytest.raises(VersionChanged):
                await late_write
        else:
            await late_write
    async with direct_client(store) as s3:
        found = await held(s3, store["bucket"], prefix + "doc")
    assert found is not None
    if conditional:
        assert (found.data, found.token) == (b"v6", 6)
    else:
        assert (found.data, found.token) == (b"v5-stale", 5)
