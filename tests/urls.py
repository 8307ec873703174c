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
