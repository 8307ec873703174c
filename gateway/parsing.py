"""Header and key validation: bad input gets a clear 400 (or 428) before anything is touched.

Fencing-Token is a decimal integer in 1..2**63-1 (the signed 64-bit range of
the BIGINT mark), written without sign, spaces or leading zeros, so one token
has one spelling. Every integer the gateway reads from a client or an upstream
(a token, a list `limit`) goes through `parse_decimal`, which takes ASCII digits
only and bounds their number before converting: `str.isdigit()` and `int()`
take any script's digits, and `int()` gives up past 4300 of them. Keys and
resources are printable ASCII path-like names with no empty, `.` or `..`
segment, so they mean the same to every store.

Each header the gateway decides on (`Fencing-Token`, `Fencing-Resource`,
`Idempotency-Key`, and `Authorization` in `gateway.clients`) has exactly one
value: sent twice, or as a comma list, it is refused. HTTP lets a proxy join
repeated fields into one comma list or keep either one, so a proxy that
authorizes or routes on one value and a gateway that fences on another would
disagree on the token; refusing leaves nothing to disagree on.

The token range, the name patterns and the limits are the API's wire rules
(`lockclient.wire`), which the client library checks before it sends; they
are also the OpenAPI document's (`gateway.openapi`), so a client generated
from it sends only what passes here.
"""

from __future__ import annotations

import re

from multidict import CIMultiDictProxy

from gateway.errors import MalformedRequest, TokenRequired
from lockclient.wire import (
    IDEMPOTENCY_KEY_PATTERN,
    KEY_PATTERN,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_RESOURCE_LENGTH,
)
from lockclient.wire import MAX_TOKEN as MAX_TOKEN  # the range every reader of a token names
from lockclient.wire import parse_decimal as parse_decimal  # the one way an integer is read
from storage.models import DEFAULT_CONTENT_TYPE, MAX_CONTENT_TYPE_LENGTH, MAX_KEY_LENGTH

MAX_LIST_LIMIT = 1000
# A key is its object's resource unless Fencing-Resource names another, so a longer key than a
# resource may be would be refused or not depending on another header, which no schema can state.
MAX_HTTP_KEY_LENGTH = min(MAX_KEY_LENGTH, MAX_RESOURCE_LENGTH)
PRINTABLE_PATTERN = r"[ -~]*"  # list prefixes and cursors
_TOKEN_RULE = f"is not a decimal integer in 1..{MAX_TOKEN} (no sign, spaces or leading zeros)"
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
_IDEMPOTENCY_KEY_RULE = (
    f"must be 1..{MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters without spaces or commas; "
    "a UUID is a good choice"
)
_NAME = re.compile(KEY_PATTERN)


def one_value(headers: CIMultiDictProxy[str], name: str) -> str | None:
    """The value of a header that must come once; 400 if it came more often."""
    values = headers.getall(name, ())
    if len(values) > 1:
        raise MalformedRequest(
            f"{name} came {len(values)} times; send it once, with one value (a proxy in front may read "
            "another of them than the gateway does)"
        )
    return values[0] if values else None


def _not_a_list(name: str, raw: str) -> None:
    if "," in raw:
        raise MalformedRequest(
            f"{name} {raw[:40]!r} is a list; send exactly one value (a proxy in front may read another "
            "element of it than the gateway does)"
        )


def _check_header(name: str, raw: str, pattern: re.Pattern[str], rule: str) -> None:
    """400 unless `raw` matches `pattern`; the message names a list as such, else says the `rule`."""
    if pattern.fullmatch(raw) is None:
        _not_a_list(name, raw)
        raise MalformedRequest(f"{name} {raw[:40]!r} {rule}")


def parse_token(raw: str | None, *, required: bool) -> int | None:
    """The token of a `Fencing-Token` header; 428 if a write has none, 400 if malformed."""
    if raw is None:
        if required:
            raise TokenRequired(
                "this request changes storage and needs a `Fencing-Token` header: take the lock and send "
                "its token"
            )
        return None
    token = token_or_none(raw)
    if token is None:
        _not_a_list("Fencing-Token", raw)
        raise MalformedRequest(f"Fencing-Token {raw[:40]!r} {_TOKEN_RULE}")
    return token


def token_or_none(raw: str | None) -> int | None:
    """The token of a header if it is well formed (as `TOKEN_PATTERN` states), else None."""
    return None if raw is None else parse_decimal(raw, low=1, high=MAX_TOKEN)


def parse_idempotency_key(raw: str | None) -> str | None:
    """The `Idempotency-Key` header: 1..128 printable ASCII characters without spaces or commas."""
    if raw is None:
        return None
    _check_header("Idempotency-Key", raw, _IDEMPOTENCY_KEY, _IDEMPOTENCY_KEY_RULE)
    return raw


def parse_content_type(raw: str | None) -> str:
    """The `Content-Type` a writer sent, kept with the object and sent back on GET; default octet-stream."""
    if raw is None or not raw.strip():
        return DEFAULT_CONTENT_TYPE
    if len(raw) > MAX_CONTENT_TYPE_LENGTH or not (raw.isascii() and raw.isprintable()) or "/" not in raw:
        raise MalformedRequest(
            f"Content-Type {raw[:40]!r} must be a media type (type/subtype, optional parameters) of at most "
            f"{MAX_CONTENT_TYPE_LENGTH} printable ASCII characters"
        )
    return raw.strip()


def _check_name(what: str, value: str, limit: int) -> str:
    if len(value) > limit:
        raise MalformedRequest(f"{what} is {len(value)} characters long; the limit is {limit}")
    if _NAME.fullmatch(value) is None:
        raise MalformedRequest(
            f"{what} {value[:80]!r} is not valid: use letters, digits and _.~:@=+,%- in segments separated "
            "by single slashes, with no '.' or '..' segment"
        )
    return value


def parse_key(raw: str) -> str:
    return _check_name("key", raw, MAX_HTTP_KEY_LENGTH)


def parse_resource(raw: str | None, *, key: str) -> str:
    """The `Fencing-Resource` header, defaulting to the object key."""
    if raw is None:
        return _check_name("resource (the key)", key, MAX_RESOURCE_LENGTH)
    _not_a_list("Fencing-Resource", raw)
    return _check_name("Fencing-Resource", raw, MAX_RESOURCE_LENGTH)


def parse_fence_resource(raw: str) -> str:
    """The resource of `/v1/fences/{resource}` (a path, not a header: a comma is a character)."""
    return _check_name("resource", raw, MAX_RESOURCE_LENGTH)


def parse_limit(raw: str | None) -> int:
    """The `limit` of a listing: a decimal integer in 1..MAX_LIST_LIMIT, spelled as a token is."""
    if raw is None:
        return MAX_LIST_LIMIT
    limit = parse_decimal(raw, low=1, high=MAX_LIST_LIMIT)
    if limit is None:
        raise MalformedRequest(
            f"limit {raw[:20]!r} must be a decimal integer in 1..{MAX_LIST_LIMIT} (ASCII digits, no sign, "
            "spaces or leading zeros)"
        )
    return limit


def parse_prefix(raw: str | None) -> str:
    prefix = raw or ""
    if len(prefix) > MAX_KEY_LENGTH or not prefix.isprintable() or not prefix.isascii():
        raise MalformedRequest(f"prefix must be printable ASCII of at most {MAX_KEY_LENGTH} characters")
    return prefix
