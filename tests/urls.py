"""Changing one parameter of a server's URL, as a user would edit it (TLS tests break one thing at a time)."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def edit_query(url: str, **changes: str | None) -> str:
    """`url` with each named query parameter set, or removed when None; the others keep their order."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    for name, value in changes.items():
        if value is None:
            query.pop(name, None)
        else:
            query[name] = value
    return urlunsplit(parts._replace(query=urlencode(query, safe="/")))


def with_host(url: str, host: str) -> str:
    """`url` reaching the same port by another name (`localhost` for a certificate that names 127.0.0.1)."""
    parts = urlsplit(url)
    user, at, addresses = parts.netloc.rpartition("@")
    netloc = ",".join(f"{host}:{address.rsplit(':', 1)[1]}" for address in addresses.split(","))
    return urlunsplit(parts._replace(netloc=user + at + netloc))


def without_query(url: str) -> str:
    return urlunsplit(urlsplit(url)._replace(query=""))


# One PostgreSQL TLS mistake each, as a user would make it, and the words of the reason it gets.
POSTGRES_TLS_MISTAKES = {
    "wrong CA": "not signed by the CA this client trusts",
    "wrong host": "not valid for the name connected to",
    "no client certificate": "requires a valid client certificate",
    "plaintext": "no encryption",  # the server is TLS only: a plaintext client is refused
}


def broken_postgres_tls(dsn: str, mistake: str, *, stranger_ca: str) -> str:
    """`dsn` with one mistake of POSTGRES_TLS_MISTAKES (`stranger_ca`: a CA that signed nothing)."""
    return {
        "wrong CA": lambda: edit_query(dsn, sslrootcert=stranger_ca),
        "wrong host": lambda: with_host(dsn, "localhost"),
        "no client certificate": lambda: edit_query(dsn, sslcert=None, sslkey=None),
        "plaintext": lambda: without_query(dsn),
    }[mistake]()
