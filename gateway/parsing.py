"""Header and key validation: bad input gets a clear 400 before anything is touched.

Every integer the gateway reads from a client or an upstream (a token, a list
`limit`) goes through `lockclient.wire.parse_decimal` (`gateway.fencing_token`
reads the token). Keys and
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

A write may carry the client's own precondition, `If-Match` or
`If-None-Match: *` (RFC 9110 13.1): a client that read an object and writes
what it computed from it sends `If-Match: "<the ETag it read>"`, and the
write lands only over that version. The fence alone cannot give this in
proxy mode: a write the gateway accepted before the reader's fenced read may
still land at the store between that read and the reader's write
(docs/safety.md); the store's compare-and-swap on the client's tag closes
that gap. Only what can be checked exactly is accepted: one strong entity tag
or `*` for `If-Match`, only `*` for `If-None-Match`, never both. A weak tag
(`W/"..."`) names a class of representations, not one version: 400.

`read_fenced` reads a fenced request's path and headers in one pass; the
view authorizes what they name, then reads the token and the body
(docs/decisions.md, Gateway and fence).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web
from multidict import CIMultiDictProxy

from gateway.errors import MalformedRequest
from lockclient.wire import (
    IDEMPOTENCY_KEY_PATTERN,
    KEY_PATTERN,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_RESOURCE_LENGTH,
    STRONG_TAG_PATTERN,
    parse_decimal,
)
from storage.models import DEFAULT_CONTENT_TYPE, MAX_CONTENT_TYPE_LENGTH, MAX_KEY_LENGTH
from storage.protocols import Precondition

if TYPE_CHECKING:
    from gateway.auth import Access

MAX_LIST_LIMIT = 1000
# A key is its object's resource unless Fencing-Resource names another, so a longer key than a
# resource may be would be refused or not depending on another header, which no schema can state.
MAX_HTTP_KEY_LENGTH = min(MAX_KEY_LENGTH, MAX_RESOURCE_LENGTH)
PRINTABLE_PATTERN = r"[ -~]*"  # list prefixes and cursors
# What a header sent as a comma list is told: a proxy may join repeated fields into one list.
LIST_HINT = "send exactly one value (a proxy in front may read another element of it than the gateway does)"
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
_IDEMPOTENCY_KEY_RULE = (
    f"must be 1..{MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters without spaces or commas; "
    "a UUID is a good choice"
)
_NAME = re.compile(KEY_PATTERN)
_STRONG_TAG = re.compile(STRONG_TAG_PATTERN)


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
        raise MalformedRequest(f"{name} {raw[:40]!r} is a list; {LIST_HINT}")


def _check_header(name: str, raw: str, pattern: re.Pattern[str], rule: str) -> None:
    """400 unless `raw` matches `pattern`; the message names a list as such, else says the `rule`."""
    if pattern.fullmatch(raw) is None:
        _not_a_list(name, raw)
        raise MalformedRequest(f"{name} {raw[:40]!r} {rule}")


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


def parse_precondition(headers: CIMultiDictProxy[str]) -> Precondition | None:
    """The request's precondition, None without one; 400 `bad_request` if malformed."""
    match = one_value(headers, "If-Match")
    none_match = one_value(headers, "If-None-Match")
    if match is None and none_match is None:
        return None
    if match is not None and none_match is not None:
        raise MalformedRequest("send If-Match or If-None-Match, not both; nothing was written")
    if none_match is not None:
        if none_match.strip() != "*":
            raise MalformedRequest(
                f"If-None-Match {none_match[:40]!r} is not accepted on a write: only `*` (create the key "
                "only if it holds nothing); nothing was written"
            )
        return Precondition(if_none_match=True)
    assert match is not None
    return Precondition(if_match=_entity_tag(match.strip()))


def _entity_tag(raw: str) -> str:
    if raw == "*":
        return raw
    if raw.startswith("W/"):
        raise MalformedRequest(
            f"If-Match {raw[:40]!r} is a weak entity tag: a write can be conditional only on a strong "
            "one, the ETag a read answered; nothing was written"
        )
    if not _STRONG_TAG.fullmatch(raw):
        hint = "a list: send exactly one entity tag" if "," in raw else "not one quoted entity tag"
        raise MalformedRequest(
            f'If-Match {raw[:40]!r} is {hint} (If-Match: "<the ETag a read answered>" or *); '
            "nothing was written"
        )
    return raw


@dataclass(frozen=True, slots=True)
class Asked:
    """What a fenced request names, each part checked; `content_type` is "" unless it is a PUT, and
    `raw_token` is the `Fencing-Token` header as sent (`gateway.fencing_token` reads it)."""

    key: str
    resource: str
    raw_token: str | None
    content_type: str = ""
    precondition: Precondition | None = None
    idempotency_key: str | None = None

    @property
    def access(self) -> Access:
        """Anything that can move a mark needs write access: a fenced read raises it too."""
        return "read" if self.raw_token is None else "write"


def read_fenced(request: web.Request) -> Asked:
    """A fenced request's path and headers: what it names (key, resource), then a write's terms
    (Content-Type on a PUT, precondition, Idempotency-Key; a read has none). Each header comes once."""
    headers = request.headers
    key = parse_key(request.match_info["key"])
    resource = parse_resource(one_value(headers, "Fencing-Resource"), key=key)
    raw_token = one_value(headers, "Fencing-Token")
    if request.method in ("GET", "HEAD"):
        return Asked(key, resource, raw_token)
    content_type = parse_content_type(headers.get("Content-Type")) if request.method == "PUT" else ""
    precondition = parse_precondition(headers)
    idempotency_key = parse_idempotency_key(one_value(headers, "Idempotency-Key"))
    return Asked(key, resource, raw_token, content_type, precondition, idempotency_key)
