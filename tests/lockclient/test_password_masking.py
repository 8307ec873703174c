"""A password in a master's or a gateway's URL never shows in a repr, a reason or an error message.

Against real Redis masters with an ACL login: `repr(lease)`, the keys of `Lease.nodes` and
`LockNotAcquired.reasons` (all logged) name a master without its password; so does the message
refusing a URL whose password holds an unencoded `#` or `?`, and the error of a gateway client that
cannot connect.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pytest

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import (
    ConfigurationError,
    GatewayClient,
    GatewayError,
    LockNotAcquired,
    QuorumUnavailable,
    Redlock,
    RetryPolicy,
)

PASSWORD = "Sup3rS3cret-pw"
LOGIN = ("app", PASSWORD)


@pytest.fixture(scope="module")
def login_masters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Three masters that each take only the ACL user `app` with `PASSWORD`; their URLs carry it."""
    with LocalCluster.running(ClusterSpec(redis=0), tmp_path_factory.mktemp("login")) as cluster:
        urls = [cluster.add_redis(login=LOGIN).url for _ in range(3)]
        assert all(PASSWORD in url for url in urls)
        yield urls


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_lease_and_a_refusal_never_show_a_masters_password(login_masters: list[str]) -> None:
    resource = f"leak-{uuid.uuid4().hex[:8]}"
    shown = [url.replace(f"app:{PASSWORD}@", "") for url in login_masters]
    async with Redlock(login_masters, ttl=10.0) as holder, Redlock(login_masters, ttl=10.0) as other:
        lease = await holder.acquire(resource)
        try:
            assert PASSWORD not in repr(lease)
            assert list(lease.nodes) == shown
            assert lease.nodes[login_masters[0]] == lease.nodes[shown[0]] == "ok"  # either name finds it
            with pytest.raises(LockNotAcquired) as refused:
                await other.acquire(resource, blocking=False)
            assert PASSWORD not in f"{refused.value} {refused.value.reasons!r}"
            assert set(refused.value.reasons) == set(shown)
            assert all(why.startswith("refused") for why in refused.value.reasons.values())
        finally:
            await holder.release(lease)


async def test_an_unreachable_quorum_never_shows_a_masters_password(login_masters: list[str]) -> None:
    down = [f"redis://app:{PASSWORD}@127.0.0.1:{_closed_port()}" for _ in range(2)]
    async with Redlock([login_masters[0], *down], retry=RetryPolicy(unreachable=0)) as locker:
        with pytest.raises(QuorumUnavailable) as caught:
            await locker.acquire(f"leak-{uuid.uuid4().hex[:8]}", blocking=False)
    error = caught.value
    assert PASSWORD not in f"{error} {error.reasons!r} {error.unreachable!r}"
    assert error.unreachable == tuple(url.replace(f"app:{PASSWORD}@", "") for url in down)
    assert all(error.reasons[url] != "ok" for url in error.unreachable)


@pytest.mark.parametrize("cut", ["#", "?"])
def test_a_password_with_an_unencoded_fragment_or_query_mark_is_masked(cut: str) -> None:
    url = f"redis://:{PASSWORD}{cut}more@127.0.0.1:1"
    with pytest.raises(ConfigurationError) as refused:
        Redlock([url, "redis://127.0.0.1:2", "redis://127.0.0.1:3"])
    assert PASSWORD not in str(refused.value)
    assert PASSWORD[:6] not in str(refused.value)  # not even the part before the mark
    assert "redis://:***@127.0.0.1:1" in str(refused.value)


async def test_a_gateway_that_cannot_be_reached_is_named_without_its_password() -> None:
    port = _closed_port()
    async with GatewayClient(f"http://alice:{PASSWORD}@127.0.0.1:{port}", retry=None) as gateway:
        with pytest.raises(GatewayError) as caught:
            await gateway.fence("r")
    assert caught.value.code == "unreachable"
    assert PASSWORD not in str(caught.value)
    assert f"http://alice:***@127.0.0.1:{port}" in str(caught.value)
