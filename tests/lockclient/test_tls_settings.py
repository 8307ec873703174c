"""TLS settings of the token sources, read from URLs and keywords, checked before anything connects.

The handshakes themselves are tested against real servers in test_tokens_tls.py
and tests/storage/test_tls.py; here, what each setting turns into, and that
every mistake is refused with the fix instead of quietly meaning plaintext.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from fencegate.lab.cluster.certs import Authority, KeyPair
from lockclient import ConfigurationError, PostgresTokens, ZooKeeperTokens, open_token_source
from lockclient.postgres_tls import PostgresTLS, split_tls
from lockclient.tokens.zookeeper import url_options

URL = "postgresql://fencegate@db.example:5432/fencegate"


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def client(authority: Authority) -> KeyPair:
    return authority.issue("postgres", hosts=(), server=False, client=True)


def _context(query: str) -> ssl.SSLContext:
    context = split_tls(f"{URL}?{query}")[1].context()
    assert context is not None
    return context


def test_tls_parameters_leave_the_url_and_the_others_stay(authority: Authority) -> None:
    url, tls = split_tls(f"{URL}?application_name=gw&sslmode=verify-full&sslrootcert={authority.cert}")
    assert url == f"{URL}?application_name=gw"
    assert (tls.mode, tls.rootcert) == ("verify-full", str(authority.cert))


def test_without_sslmode_it_is_plaintext_and_says_so_to_asyncpg() -> None:
    """An explicit ssl=False: asyncpg's own default would be `prefer`, which falls back silently."""
    url, tls = split_tls(URL)
    assert url == URL
    assert tls == PostgresTLS()
    assert tls.connect_args() == {"ssl": False}
    assert tls.describe() == "plaintext (sslmode=disable)"


@pytest.mark.parametrize(
    ("query", "verify_mode", "check_hostname"),
    [
        ("sslmode=require", ssl.CERT_NONE, False),
        ("sslmode=require&sslrootcert={ca}", ssl.CERT_REQUIRED, False),  # libpq: require + a CA = verify-ca
        ("sslmode=verify-ca&sslrootcert={ca}", ssl.CERT_REQUIRED, False),
        ("sslmode=verify-full&sslrootcert={ca}", ssl.CERT_REQUIRED, True),
        ("ssl=verify-full&sslrootcert={ca}", ssl.CERT_REQUIRED, True),  # SQLAlchemy's spelling
        ("sslmode=verify-full&sslrootcert=system", ssl.CERT_REQUIRED, True),
    ],
)
def test_each_sslmode_verifies_what_libpq_verifies(
    authority: Authority, query: str, verify_mode: ssl.VerifyMode, check_hostname: bool
) -> None:
    context = _context(query.format(ca=authority.cert))
    assert context.verify_mode == verify_mode
    assert context.check_hostname is check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_versions_client_certificate_and_direct_negotiation(authority: Authority, client: KeyPair) -> None:
    query = (
        f"sslmode=verify-full&sslrootcert={authority.cert}&sslcert={client.cert}&sslkey={client.key}"
        "&ssl_min_protocol_version=TLSv1.3&ssl_max_protocol_version=TLSv1.3&sslnegotiation=direct"
    )
    tls = split_tls(f"{URL}?{query}")[1]
    context = tls.context()
    assert context is not None
    assert (context.minimum_version, context.maximum_version) == (ssl.TLSVersion.TLSv1_3,) * 2
    assert tls.connect_args()["direct_tls"] is True
    assert f"sslcert={client.cert}" in tls.describe()


def test_an_encrypted_client_key_opens_with_sslpassword_which_is_never_shown(
    authority: Authority, client: KeyPair, tmp_path: Path
) -> None:
    key = serialization.load_pem_private_key(client.key.read_bytes(), password=None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret-pass"),
        )
    )
    base = f"{URL}?sslmode=verify-full&sslrootcert={authority.cert}&sslcert={client.cert}&sslkey={locked}"
    with pytest.raises(ConfigurationError, match="cannot use the client certificate"):
        split_tls(base + "&sslpassword=wrong")
    tls = split_tls(base + "&sslpassword=s3cret-pass")[1]
    assert "s3cret-pass" not in repr(tls)
    assert "s3cret-pass" not in tls.describe()
    assert "s3cret-pass" not in repr(PostgresTokens(base + "&sslpassword=s3cret-pass"))


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("sslmode=prefer", "sslmode=prefer is refused: it falls back to plaintext"),
        ("sslmode=allow", "sslmode=allow is refused"),
        ("sslmode=verify", "not one of disable, require, verify-ca, verify-full"),
        ("sslmode=verify-full", "needs sslrootcert=FILE"),
        ("sslmode=verify-ca", "needs sslrootcert=FILE"),
        ("sslrootcert={ca}", "given but TLS is off: add sslmode=verify-full"),
        ("sslmode=disable&sslcert={ca}&sslkey={ca}", "given but TLS is off"),
        ("sslmode=verify-ca&sslrootcert=system", "use it with sslmode=verify-full"),
        ("sslmode=require&sslcert={ca}", "sslcert and sslkey go together"),
        ("sslmode=require&sslmode=verify-full", "sets sslmode twice"),
        ("sslmode=require&ssl=disable", "sets ssl twice"),
        ("sslmode=require&sslcompression=1", "'sslcompression' is not a TLS parameter"),
        ("sslmode=require&ssl_min_protocol_version=TLSv1.1", "use TLSv1.2 or TLSv1.3"),
        ("sslmode=require&sslnegotiation=fast", "not postgres or direct"),
        ("sslnegotiation=direct", "sslnegotiation=direct needs sslmode"),
        (
            "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "cannot use the CA file '/nonexistent/ca.pem'",
        ),
        ("sslmode=verify-full&sslrootcert={key}", "cannot use the CA file"),  # a key is no certificate
    ],
)
def test_mistakes_are_refused_with_the_fix_before_connecting(
    authority: Authority, client: KeyPair, query: str, message: str
) -> None:
    url = f"{URL}?{query.format(ca=authority.cert, key=client.key)}"
    with pytest.raises(ConfigurationError, match=message):
        split_tls(url)
    with pytest.raises(ConfigurationError, match=message):
        PostgresTokens(url)


def test_a_client_key_that_is_not_the_certificates_is_refused(authority: Authority, client: KeyPair) -> None:
    other = authority.issue("other", hosts=(), server=False, client=True)
    query = f"sslmode=require&sslcert={client.cert}&sslkey={other.key}"
    with pytest.raises(ConfigurationError, match="cannot use the client certificate"):
        split_tls(f"{URL}?{query}")


def test_zookeeper_urls_carry_kazoos_tls_settings(authority: Authority, client: KeyPair) -> None:
    query = f"use_ssl=true&ca={authority.cert}&certfile={client.cert}&keyfile={client.key}&check_hostname=0"
    source = open_token_source(f"zookeeper://zk1:2281,zk2:2281/app?{query}")
    assert isinstance(source, ZooKeeperTokens)
    assert (source.hosts, source.chroot, source.use_ssl) == ("zk1:2281,zk2:2281", "/app", True)
    assert url_options(query) == {
        "use_ssl": True,
        "ca": str(authority.cert),
        "certfile": str(client.cert),
        "keyfile": str(client.key),
        "check_hostname": False,
    }
    plain = open_token_source("zookeeper://zk1:2181?")
    assert isinstance(plain, ZooKeeperTokens)
    assert (plain.hosts, plain.chroot, plain.use_ssl) == ("zk1:2181", "", False)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("use_ssl=maybe", "use_ssl='maybe' is not a boolean"),
        ("use_ssl=true&use_ssl=false", "sets use_ssl twice"),
        ("ssl_ca=x", "'ssl_ca' is not a zookeeper:// URL parameter"),
        ("ca={ca}", "ca given but use_ssl is off: add use_ssl=true"),
        ("certfile={cert}&keyfile={key}", "certfile, keyfile given but use_ssl is off"),
        ("use_ssl=true&certfile={cert}", "certfile and keyfile go together"),
        ("use_ssl=true&ca=/nonexistent/ca.pem", "cannot use the CA file"),
    ],
)
def test_zookeeper_tls_mistakes_are_refused_with_the_fix(
    authority: Authority, client: KeyPair, query: str, message: str
) -> None:
    url = f"zookeeper://zk1:2281?{query.format(ca=authority.cert, cert=client.cert, key=client.key)}"
    with pytest.raises(ConfigurationError, match=message):
        open_token_source(url)


def test_zookeeper_keywords_without_verification_encrypt_only(authority: Authority) -> None:
    source = ZooKeeperTokens("zk1:2281", use_ssl=True, verify_certs=False)
    assert source.use_ssl
    with pytest.raises(ConfigurationError, match="ca given but use_ssl is off"):
        ZooKeeperTokens("zk1:2281", ca=str(authority.cert))
