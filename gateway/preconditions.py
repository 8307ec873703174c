"""The client's own precondition on a write: `If-Match` and `If-None-Match: *` (RFC 9110 13.1).

A client that read an object and writes what it computed from it sends
`If-Match: "<the ETag it read>"`: the write lands only over that version.
The fence alone cannot give this in proxy mode: a write the gateway
accepted before the reader's fenced read may still land at the store
between that read and the reader's write (docs/safety.md). The store's
compare-and-swap, on the client's tag, closes that gap.

Only what can be checked exactly is accepted: one strong entity tag or `*`
for `If-Match`, only `*` for `If-None-Match`, each header once, never both.
A weak tag (`W/"..."`) names a class of representations, not one version,
and a list would let a proxy in front read another element than the
gateway does: both are 400, as is anything else malformed.
"""

from __future__ import annotations

import re

from multidict import CIMultiDictProxy

from gateway.errors import MalformedRequest
from gateway.parsing import one_value
from lockclient.wire import STRONG_TAG_PATTERN
from storage.protocols import Precondition

_STRONG_TAG = re.compile(STRONG_TAG_PATTERN)


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
