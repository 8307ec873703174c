"""Redis over TLS, on real TLS-only redis-server masters with certificates made here.

The masters listen on TLS only (`--port 0 --tls-port P`), require a client
certificate and have one ACL user (the default user is off), as a careful
deployment runs them. Each way a TLS connection can be wrong (the CA, an
expired or wrong-host certificate, no client certificate) must fail with
the master's name and the reason, and a `rediss://` master must never be
spoken to in plaintext.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
from redis.asyncio import Redis

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from fencegate.lab.cluster.certs import Authority
from fencegate.lab.cluster.servers import Node
from lockclient import ConfigurationError, LockNotAcquired, Redlock, RetryPolicy, TLSSettings
from lockclient import sync as lockclient_sync
from lockclient._nodes import release_channel
from lockclient._quorum import display_url
from lockclient.transport.endpoint import Endpoint
from tests.closing import closing
from tests.lockclient.conftest import eventually, values
from tests.waiting import eventually_sync

# The lock user of docs/lockclient.md: its keys and release channels, and the commands the lock sends
# (the scripts run with the caller's rights, so GET, DEL, PEXPIRE and PUBLISH too).
LEAST_PRIVILEGE = (
    "~fencegate:lock:*", "&fencegate:lock:*", "-@all", "+set", "+get", "+del", "+pexpire", "+eval",
    "+evalsha", "+publish", "+subscribe", "+unsubscribe", "+ping",
)  # fmt: skip


@dataclasses.dataclass
class TLSMasters:
    """Five good TLS masters, and one each with an expired or a wrong-host certificate."""

    cluster: LocalCluster
    expired: Node
    wrong_host: Node
    plaintext: Node
    other_ca: Path  # a CA that signed none of them

    @property
    def urls(self) -> list[str]:
        return [self.cluster.nodes[f"redis-{i}"].url for i in range(5)]

    def url(self, node: Node, **changes: str | None) -> str:
        """`node`'s URL with its TLS parameters changed (None drops one)."""
        parts = urlsplit(node.url)
        settings = {k: v for k, v in {**node.tls, **changes}.items() if v is not None}
        return parts._replace(query=urlencode(settings)).geturl()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSMasters]:
    spec = ClusterSpec(redis=5, redis_tls=True)
    with LocalCluster.running(spec, tmp_path_factory.mktemp("tls")) as cluster:
        login = cluster.tls_login
        expired = cluster.add_redis(tls=cluster.redis_tls("expired", expired=True), login=login)
        wrong_host = cluster.add_redis(
            tls=cluster.redis_tls("elsewhere", hosts=("db.example.com",)), login=login
        )
        plaintext = cluster.add_redis()
        other = Authority(cluster.dir / "other-ca", name="another CA")
        yield TLSMasters(cluster, expired, wrong_host, plaintext, other.cert)


async def test_a_redlock_over_five_tls_only_masters_with_a_client_certificate_and_an_acl_user(
    tls: TLSMasters,
) -> None:
    resource = f"tls-{uuid.uuid4().hex[:8]}"
    raw = [Redis.from_url(url) for url in tls.urls]  # redis-py reads the same URLs
    async with closing(*raw):
        assert [await r.config_get("port") for r in raw] == [{"port": "0"}] * 5  # no plaintext port at all
        async with Redlock(tls.urls, node_timeout=1.0, ttl=30.0) as locker:
            lease = await locker.acquire(resource, blocking=False)
            await eventually(lambda: set(lease.nodes.values()) == {"ok"}, what="every master's grant")
            assert set(await values(raw, locker.key(resource))) == {lease.value.encode()}
            await locker.extend(lease, ttl=60.0)  # returns once a quorum confirmed; the rest follow

            async def extended() -> bool:
                ttls = [await r.pttl(locker.key(resource)) for r in raw]
                return all(30_000 < t <= 60_000 for t in ttls)

            await eventually(extended, what="the extension on every master")
            for client in raw:  # every connection, the lock's own included, logged in as the ACL user
                users = {c["user"] for c in await client.client_list()}
                assert users == {"fencegate"}
            await locker.release(lease)

            async def released() -> bool:
                return await values(raw, locker.key(resource)) == [None] * 5

            await eventually(released, what="the release on every master")


async def test_a_waiter_is_woken_through_pub_sub_over_tls(tls: TLSMasters) -> None:
    """The waiter's fallback poll (10 minutes) is far beyond the test's deadline: only the release
    message can wake it in time."""
    resource = f"tls-wake-{uuid.uuid4().hex[:8]}"
    raw = [Redis.from_url(url) for url in tls.urls]
    async with closing(*raw):
        for client in raw:
            await client.config_resetstat()
        async with (
            Redlock(tls.urls, node_timeout=1.0) as holder,
            Redlock(tls.urls, node_timeout=1.0, retry=RetryPolicy(poll=600.0)) as waiter,
        ):
            lease = await holder.acquire(resource)
            waiting = asyncio.create_task(waiter.acquire(resource, timeout=600.0))

            async def waiter_tried_after_subscribing() -> bool:
                # the holder's SET, the waiter's first attempt, and the one it makes once subscribed
                stats = [await client.info("commandstats") for client in raw]
                return all(s.get("cmdstat_set", {}).get("calls", 0) >= 3 for s in stats)

            await eventually(waiter_tried_after_subscribing, what="the waiter's attempt after subscribing")
            assert not waiting.done()
            await holder.release(lease)
            async with asyncio.timeout(30):  # a deadline, not a measure: without the message it is 600 s
                taken = await waiting
            assert taken.value != lease.value
            await waiter.release(taken)


async def test_a_lock_user_with_only_the_documented_rights_can_lock_extend_release_and_wait(
    tls: TLSMasters,
) -> None:
    cluster = tls.cluster
    password = "least-privilege"
    args = ("--user", "locker", "on", f">{password}", *LEAST_PRIVILEGE)
    nodes = [await asyncio.to_thread(cluster.add_redis, tls=True, args=args) for _ in range(3)]
    urls = [n.url.replace("rediss://", f"rediss://locker:{password}@") for n in nodes]
    resource = f"tls-acl-{uuid.uuid4().hex[:8]}"
    async with (
        Redlock(urls, node_timeout=1.0) as holder,
        Redlock(urls, node_timeout=1.0, retry=RetryPolicy(poll=600.0)) as waiter,
    ):
        lease = await holder.acquire(resource, blocking=False)
        await holder.extend(lease)
        waiting = asyncio.create_task(waiter.acquire(resource, timeout=600.0))
        channel = release_channel(holder.key(resource))
        admins = [Redis.from_url(n.url) for n in nodes]  # the default user, to look
        async with closing(*admins):

            async def subscribed() -> bool:
                counts = [dict(await admin.pubsub_numsub(channel)) for admin in admins]
                return all(count.get(channel.encode()) == 1 for count in counts)

            await eventually(subscribed, what="the waiter's subscription, as the lock user")
        await holder.release(lease)
        async with asyncio.timeout(30):  # a deadline, not a measure: without the message it is 600 s
            taken = await waiting
        await waiter.release(taken)
    async with Redlock(urls, node_timeout=1.0, key_prefix="other:") as elsewhere:
        with pytest.raises(LockNotAcquired) as caught:  # and it can touch nothing else
            await elsewhere.acquire(resource, blocking=False)
    assert all("NOPERM" in why for why in caught.value.reasons.values())


async def test_tls_settings_given_as_keywords_reach_every_master(tls: TLSMasters) -> None:
    """The URL carries only the login; the sync facade is given the TLS settings as one keyword."""
    node = tls.cluster.nodes["redis-0"]
    settings = TLSSettings(
        ssl_ca_certs=node.tls["ssl_ca_certs"],
        ssl_certfile=node.tls["ssl_certfile"],
        ssl_keyfile=node.tls["ssl_keyfile"],
    )
    bare = [urlsplit(url)._replace(query="").geturl() for url in tls.urls]
    resource = f"tls-sync-{uuid.uuid4().hex[:8]}"

    def lock_once() -> None:
        with lockclient_sync.Redlock(bare, tls=settings, node_timeout=1.0) as locker:
            lease = locker.acquire(resource, blocking=False)
            eventually_sync(lambda: set(lease.nodes.values()) == {"ok"}, what="every master's grant")
            locker.release(lease)

    await asyncio.to_thread(lock_once)


def _broken(tls: TLSMasters) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each wrong setup: (the master's URL, what its reason must say)."""
    good = tls.cluster.nodes["redis-0"]
    return {
        "a CA that did not sign it": (
            tls.url(good, ssl_ca_certs=str(tls.other_ca)),
            (
                "the master's certificate is not signed by the CA this client trusts (",
                "ssl_ca_certs must hold",
            ),
        ),
        "an expired certificate": (
            tls.url(tls.expired),
            ("the master's certificate has expired: renew it",),
        ),
        "a certificate for another host": (
            tls.url(tls.wrong_host),
            (
                "the master's certificate is not valid for the name connected to (IP address mismatch",
                "'127.0.0.1'",
            ),
        ),
        "no client certificate": (
            tls.url(good, ssl_certfile=None, ssl_keyfile=None),
            ("the master requires a client certificate: give ssl_certfile and ssl_keyfile",),
        ),
    }


@pytest.mark.parametrize(
    "case", ["a CA that did not sign it", "an expired certificate", "a certificate for another host",
             "no client certificate"],
)  # fmt: skip
async def test_a_wrong_tls_setup_fails_naming_the_master_and_the_reason(tls: TLSMasters, case: str) -> None:
    url, phrases = _broken(tls)[case]
    node_port = urlsplit(url).port
    name = f"rediss://fencegate:***@127.0.0.1:{node_port}"
    async with Redlock([url], node_timeout=5.0, ttl=30.0) as locker:
        with pytest.raises(LockNotAcquired) as caught:
            await locker.acquire(f"tls-bad-{uuid.uuid4().hex[:8]}", blocking=False)
    reason = caught.value.reasons[display_url(url)]
    assert reason.startswith(f"TLSError: cannot connect to {name}: TLS: "), reason
    for phrase in phrases:
        assert phrase in reason, reason
    assert tls.cluster.tls_login[1] not in reason  # the password is never shown


async def test_a_rediss_master_is_never_spoken_to_in_plaintext(tls: TLSMasters) -> None:
    """A `rediss://` URL pointing at a plaintext master fails; no command reaches the master."""
    url = f"rediss://127.0.0.1:{tls.plaintext.port}?" + urlencode({"ssl_ca_certs": str(tls.other_ca)})
    resource = f"tls-plain-{uuid.uuid4().hex[:8]}"
    async with Redis.from_url(tls.plaintext.url) as raw:
        await raw.config_resetstat()
        async with Redlock([url], node_timeout=1.0, ttl=30.0) as locker:
            with pytest.raises(LockNotAcquired) as caught:
                await locker.acquire(resource, blocking=False)
        assert "no answer" in caught.value.reasons[display_url(url)]  # the TLS handshake never finished
        assert await raw.get(locker.key(resource)) is None
        assert "cmdstat_set" not in await raw.info("commandstats")


def test_tls_is_never_inferred_or_dropped(tls: TLSMasters) -> None:
    plain = f"redis://127.0.0.1:{tls.plaintext.port}"
    with pytest.raises(ConfigurationError, match="plaintext URL but TLS settings were given: use rediss://"):
        Redlock([plain], tls=TLSSettings())
    with pytest.raises(ConfigurationError, match="plaintext URL but ssl_ca_certs were given"):
        Redlock([f"{plain}?ssl_ca_certs={tls.other_ca}"])


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("rediss://h?ssl_cert_reqs=sometimes", "ssl_cert_reqs must be one of required, optional, none"),
        ("rediss://h?ssl_check_hostname=perhaps", "ssl_check_hostname is not valid"),
        ("rediss://h?ssl_ca_cert=/ca.pem", r"query parameters lockclient does not read \(ssl_ca_cert\)"),
        ("rediss://h?ssl_cert_reqs=none&ssl_cert_reqs=required", "ssl_cert_reqs more than once"),
        ("rediss://h?ssl_keyfile=/k.pem", "ssl_keyfile is given without ssl_certfile"),
        ("rediss://h?ssl_cert_reqs=none&ssl_check_hostname=true", "ssl_check_hostname needs a verified"),
        ("rediss://h?ssl_ca_certs=/nonexistent/ca.pem", "ssl_ca_certs '/nonexistent/ca.pem' cannot be used"),
        ("rediss://u:s3cret@h?ssl_certfile=/nonexistent/c.pem", "the client certificate"),
        ("rediss://u:s3cret@h/x", "its database 'x' is not a number"),
    ],
)
def test_bad_tls_urls_are_refused_when_built_naming_the_master_without_its_password(
    url: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        Redlock([url])
    assert "s3cret" not in str(caught.value)
    assert str(caught.value).startswith("master 'rediss://")


def test_url_parameters_win_over_the_keyword_settings_for_their_master() -> None:
    given = TLSSettings(ssl_ca_certs="/etc/ca.pem", ssl_cert_reqs="required")
    endpoint = Endpoint.from_url("rediss://h:7000?ssl_cert_reqs=none&ssl_check_hostname=no", tls=given)
    assert endpoint.tls == TLSSettings(
        ssl_ca_certs="/etc/ca.pem", ssl_cert_reqs="none", ssl_check_hostname=False
    )
    assert Endpoint.from_url("rediss://h:7000", tls=given).tls == given
    assert Endpoint.from_url("rediss://h:7000").tls == TLSSettings()  # verified against the system's CAs
    assert TLSSettings().checks_hostname
    assert not TLSSettings(ssl_cert_reqs="none").checks_hostname
