"""etcd tokens over TLS, on real members whose client URLs are https only.

One cluster requires a client certificate (3 members), one does not (1
member). Every mistake a user can make is either a `ConfigurationError` when
the source is made, or a `TokenSourceError` on the first draw that names the
member and the fix, within the draw's timeout: never a token, never a hang,
never a plaintext retry.
"""

from __future__ import annotations

import asyncio
import itertools
from urllib.parse import parse_qsl, urlsplit

import pytest
from cryptography.hazmat.primitives import serialization

from fencegate.lab.cluster import LocalCluster
from fencegate.lab.cluster.certs import Authority
from lockclient import ConfigurationError, EtcdTokens, TLSError, TokenSourceError, open_token_source
from tests.urls import edit_query, with_host

TIMEOUT = 3.0  # the draw's deadline in the failure tests
SLACK = 10.0  # on top of it, a deadline on the test (not a speed claim): an error, not a hang
TASKS = 8  # concurrent drawers per resource
DRAWS = 10  # tokens each drawer takes one after the other
RESOURCES = 3


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """Another CA of the same name: it signed nothing the members show, and signs a client
    certificate the members do not trust."""
    return Authority(tmp_path_factory.mktemp("etcd-stranger"))


def tls_of(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query))


def hosts_of(url: str) -> str:
    return urlsplit(url).netloc


async def strictly_increasing(source: EtcdTokens, resource: str, count: int = 5) -> list[int]:
    tokens = [await source.next_token(resource) for _ in range(count)]
    assert all(a < b for a, b in itertools.pairwise(tokens)), tokens
    assert await source.upper_bound(resource) == tokens[-1]
    return tokens


async def test_tokens_strictly_increase_over_tls(
    etcd_server_tls_cluster: LocalCluster, resource: str
) -> None:
    source = open_token_source(etcd_server_tls_cluster.etcd)
    assert isinstance(source, EtcdTokens)
    assert source.use_ssl
    async with source:
        await strictly_increasing(source, resource)


async def test_tokens_strictly_increase_over_mutual_tls_from_keywords_and_from_the_url(
    etcd_tls_cluster: LocalCluster, resource: str
) -> None:
    url = etcd_tls_cluster.etcd
    tls = tls_of(url)
    keywords = EtcdTokens(
        hosts_of(url), use_ssl=True, ca=tls["ca"], certfile=tls["certfile"], keyfile=tls["keyfile"]
    )
    from_url = open_token_source(url)
    assert isinstance(from_url, EtcdTokens)
    async with keywords, from_url:
        first = await strictly_increasing(keywords, resource)
        second = await strictly_increasing(from_url, resource)
    assert second[0] > first[-1]


async def test_concurrent_draws_over_tls_strictly_increase_per_resource(
    etcd_tls_cluster: LocalCluster, resource: str
) -> None:
    """Many drawers at once share transactions; per resource, a draw that began after another one
    ended gets a larger token, and no two draws get the same one."""
    loop = asyncio.get_running_loop()
    names = [f"{resource}-{i}" for i in range(RESOURCES)]
    draws: dict[str, list[tuple[float, float, int]]] = {name: [] for name in names}

    async def drawer(source: EtcdTokens, name: str) -> None:
        for _ in range(DRAWS):
            began = loop.time()
            token = await source.next_token(name)
            draws[name].append((began, loop.time(), token))

    source = open_token_source(etcd_tls_cluster.etcd)
    assert isinstance(source, EtcdTokens)
    async with source:
        await asyncio.gather(*(drawer(source, name) for name in names for _ in range(TASKS)))
        for name, made in draws.items():
            tokens = [token for _, _, token in made]
            assert len(set(tokens)) == TASKS * DRAWS, "one resource got one token twice"
            for (_, ended, earlier), (began, _, later) in itertools.permutations(made, 2):
                if ended < began:
                    assert earlier < later, f"{name}: a later draw got a lower token"
            assert await source.upper_bound(name) == max(tokens)


async def refusal(source: EtcdTokens, resource: str, message: str) -> TokenSourceError:
    """The error of `source`'s first draw, which must say `message` and come within its timeout."""
    async with source, asyncio.timeout(source.timeout + SLACK):
        with pytest.raises(TokenSourceError, match=message) as caught:
            await source.next_token(resource)
    assert caught.value.source == "etcd"
    return caught.value


@pytest.mark.parametrize(
    ("mistake", "message"),
    [
        ("wrong CA", "not signed by the CA this client trusts: ca must hold the CA that signed it"),
        ("wrong host", "not valid for the name connected to"),
        ("no client certificate", "requires a client certificate: give certfile and keyfile"),
        ("untrusted client certificate", "refused the client's certificate"),
    ],
)
async def test_a_failed_handshake_is_an_error_naming_the_member_and_the_fix(
    etcd_tls_cluster: LocalCluster, stranger: Authority, resource: str, mistake: str, message: str
) -> None:
    url = etcd_tls_cluster.etcd
    client = stranger.issue("etcd-stranger-client", hosts=(), server=False, client=True)
    broken = {
        "wrong CA": edit_query(url, ca=str(stranger.cert)),
        "wrong host": with_host(url, "localhost"),
        "no client certificate": edit_query(url, certfile=None, keyfile=None),
        "untrusted client certificate": edit_query(url, certfile=str(client.cert), keyfile=str(client.key)),
    }[mistake]
    source = open_token_source(broken)
    assert isinstance(source, EtcdTokens)
    source.timeout = TIMEOUT
    error = await refusal(source, resource, message)
    assert isinstance(error.__cause__, TLSError)
    assert error.__cause__.server in hosts_of(broken).split(",")
    assert "check ca, certfile and keyfile" in str(error)


async def test_the_members_certificate_is_checked_against_the_ca_even_without_a_client_certificate(
    etcd_server_tls_cluster: LocalCluster, stranger: Authority, resource: str
) -> None:
    source = open_token_source(edit_query(etcd_server_tls_cluster.etcd, ca=str(stranger.cert)))
    assert isinstance(source, EtcdTokens)
    source.timeout = TIMEOUT
    await refusal(source, resource, "not signed by the CA this client trusts")


async def test_a_plaintext_client_of_a_tls_member_gets_an_error_not_a_hang(
    etcd_server_tls_cluster: LocalCluster, resource: str
) -> None:
    source = EtcdTokens(hosts_of(etcd_server_tls_cluster.etcd), timeout=TIMEOUT, request_timeout=1.0)
    await refusal(source, resource, r"within 3 s .*members with https client URLs need use_ssl=true")


async def test_a_tls_client_never_falls_back_to_plaintext(
    etcd_cluster: LocalCluster, etcd_server_tls_cluster: LocalCluster, resource: str
) -> None:
    """The plain members would answer plaintext: a client that asked for TLS must fail instead."""
    tls = tls_of(etcd_server_tls_cluster.etcd)
    source = open_token_source(edit_query(etcd_cluster.etcd, **tls))
    assert isinstance(source, EtcdTokens)
    source.timeout = TIMEOUT
    await refusal(source, resource, "no TLS connection to .*does it serve TLS")


def test_repr_shows_no_files_nor_key_material(etcd_tls_cluster: LocalCluster) -> None:
    """The gateway logs its source's repr at start-up."""
    url = etcd_tls_cluster.etcd
    source = open_token_source(url)
    shown = repr(source)
    assert shown == f"EtcdTokens({hosts_of(url)!r}, use_ssl=True)"  # the hosts alone: no paths, no keys


# -- bad settings: each one a ConfigurationError when the source is made, saying what to change


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, stranger: Authority) -> dict[str, str]:
    """A CA, a client pair, a key of another pair, an encrypted key, a file that is not PEM."""
    directory = tmp_path_factory.mktemp("etcd-files")
    client = stranger.issue("etcd-files-client", hosts=(), server=False, client=True)
    other = stranger.issue("etcd-files-other", hosts=(), server=False, client=True)
    key = serialization.load_pem_private_key(client.key.read_bytes(), password=None)
    encrypted = directory / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    garbage = directory / "garbage.pem"
    garbage.write_text("not a certificate\n")
    return {
        "ca": str(stranger.cert),
        "cert": str(client.cert),
        "key": str(client.key),
        "other key": str(other.key),
        "encrypted": str(encrypted),
        "garbage": str(garbage),
        "missing": str(directory / "missing.pem"),
    }


# (query, the message, whether the same mistake can be made with keywords)
BAD_SETTINGS = {
    "missing CA file": ("use_ssl=true&ca={missing}", "cannot use the CA file .*missing.pem", True),
    "CA file not PEM": ("use_ssl=true&ca={garbage}", "cannot use the CA file .*garbage.pem", True),
    "certificate without key": (
        "use_ssl=true&ca={ca}&certfile={cert}",
        "certfile and keyfile go together",
        True,
    ),
    "key without certificate": (
        "use_ssl=true&ca={ca}&keyfile={key}",
        "certfile and keyfile go together",
        True,
    ),
    "missing key file": (
        "use_ssl=true&ca={ca}&certfile={cert}&keyfile={missing}",
        "cannot use keyfile",
        True,
    ),
    "key of another certificate": (
        "use_ssl=true&ca={ca}&certfile={cert}&keyfile={other key}",
        "cannot use the client certificate",
        True,
    ),
    "encrypted key": (
        "use_ssl=true&ca={ca}&certfile={cert}&keyfile={encrypted}",
        "encrypted and gRPC takes no password: give an unencrypted key",
        True,
    ),
    "files without use_ssl": (
        "ca={ca}&certfile={cert}",
        "ca, certfile given but use_ssl is off: add use_ssl=true",
        True,
    ),
    "use_ssl not a boolean": ("use_ssl=maybe", "not a boolean: use true or false", False),
    "verification turned off": ("use_ssl=true&verify_certs=false", "always verified", False),
    "a parameter twice": ("use_ssl=true&use_ssl=false", "sets use_ssl twice", False),
}


@pytest.mark.parametrize(("query", "message", "keywords"), BAD_SETTINGS.values(), ids=BAD_SETTINGS.keys())
def test_bad_tls_settings_are_a_configuration_error_that_says_the_fix(
    files: dict[str, str], query: str, message: str, keywords: bool
) -> None:
    query = query.format_map(files)
    with pytest.raises(ConfigurationError, match=message):
        open_token_source(f"etcd://127.0.0.1:2379?{query}")
    if keywords:
        settings = dict(parse_qsl(query))
        use_ssl = settings.pop("use_ssl", None) == "true"
        with pytest.raises(ConfigurationError, match=message):
            EtcdTokens(
                "127.0.0.1:2379",
                use_ssl=use_ssl,
                ca=settings.get("ca"),
                certfile=settings.get("certfile"),
                keyfile=settings.get("keyfile"),
            )
