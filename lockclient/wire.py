"""The wire rules of the gateway's HTTP API: one home, read by the client and the gateway alike.

The gateway (`gateway.parsing`, `gateway.fencing_token`, `gateway.openapi`)
refuses what breaks them with a 400; the client (`GatewayClient`, `lockclient.sql`) refuses to send
it (`ConfigurationError`, nothing sent). One definition, so the two cannot
drift: what the client sends, the gateway reads.

`Fencing-Token` is a decimal integer in 1..2^63-1 (the signed 64-bit range
of the BIGINT mark), without sign, spaces or leading zeros. A key or
resource is segments of printable ASCII joined by single slashes, no
segment `.` or `..` (a URL resolves those, so `a/x/../b` would name `a/b`).
A resource in a header has no comma, which separates list values there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import quote

from lockclient.errors import ConfigurationError

FENCING_TOKEN = "Fencing-Token"  # noqa: S105 (a header name, not a secret)
FENCING_RESOURCE = "Fencing-Resource"
IDEMPOTENCY_KEY = "Idempotency-Key"
OBJECT_VERSION = "Object-Version"
IF_MATCH = "If-Match"
# the `error` codes of the answers whose fields a client reads (docs/gateway.md has them all)
STALE_TOKEN = "stale_token"  # noqa: S105 (an error code, not a secret)
RESOURCE_MISMATCH = "resource_mismatch"
TOKEN_FROM_THE_FUTURE = "token_from_the_future"  # noqa: S105 (an error code, not a secret)
IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"

MAX_TOKEN = 2**63 - 1
MAX_RESOURCE_LENGTH = 256
MAX_IDEMPOTENCY_KEY_LENGTH = 128
MAX_ETAG_LENGTH = 256  # an ETag, quotes included, as long as the gateway stores one
# RFC 9110 8.8.3: opaque-tag = DQUOTE *etagc DQUOTE (ASCII etagc here): one strong entity tag
STRONG_TAG_PATTERN = f'"[!#-~]{{0,{MAX_ETAG_LENGTH - 2}}}"'
RESOURCE_CHARS = "A-Za-z0-9_.~:@=+%-"  # a segment of a resource named in a header
KEY_CHARS = "A-Za-z0-9_.~:@=+,%-"  # a segment of a key (or of a resource named by its key or path)


def _at_most(bound: int) -> str:
    """A regex of the decimal integers 1..`bound` without leading zeros: shorter numbers, then each
    digit of `bound` lowered once (any digits after it), then `bound` itself."""
    digits = str(bound)
    shorter = [rf"[1-9][0-9]{{0,{len(digits) - 2}}}"] if len(digits) > 1 else []
    lowered = [
        rf"{digits[:i]}[{low}-{int(d) - 1}]" + (rf"[0-9]{{{rest}}}" if (rest := len(digits) - i - 1) else "")
        for i, d in enumerate(digits)
        if int(d) > (low := 1 if i == 0 else 0)
    ]
    return "|".join([*shorter, *lowered, digits])


def name_pattern(chars: str) -> str:
    """Segments of `chars` joined by single slashes; no segment is `.` or `..` (no lookahead, so
    every regex engine a client generator uses reads it the same)."""
    no_dot = chars.replace(".", "")
    segment = rf"(?:[{no_dot}][{chars}]*|\.[{no_dot}][{chars}]*|\.\.[{chars}]+)"
    return rf"{segment}(?:/{segment})*"


TOKEN_PATTERN = _at_most(MAX_TOKEN)  # the spellings of 1..MAX_TOKEN
# printable ASCII without space and comma (a comma separates list values in a header)
IDEMPOTENCY_KEY_PATTERN = rf"[!-+\--~]{{1,{MAX_IDEMPOTENCY_KEY_LENGTH}}}"
KEY_PATTERN = name_pattern(KEY_CHARS)
# A key or resource in a URL path as the OpenAPI document states it: no '%', which a client must send
# as %25 (a raw '%' followed by hex digits is decoded into another name). The server still accepts
# such names.
PATH_KEY_PATTERN = name_pattern(KEY_CHARS.replace("%", ""))
HEADER_RESOURCE_PATTERN = name_pattern(RESOURCE_CHARS)
_HEADER_RESOURCE = re.compile(HEADER_RESOURCE_PATTERN)
# `[0-9]`, not `\d` nor str.isdigit(): those take every script's digits (full-width, Arabic-Indic, ...;
# isdigit() even superscripts, which int() then refuses).
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
MAX_READ = 10**19 - 1  # the largest count or token the client reads from an answer
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
_STRONG_TAG = re.compile(STRONG_TAG_PATTERN)


def parse_decimal(raw: str, *, low: int, high: int) -> int | None:
    """The integer `raw` writes if it is one in `low..high` in ASCII decimal digits with no sign, spaces,
    underscores or leading zeros; None otherwise (the caller words the refusal).

    The one way the gateway and the client read an integer someone else sent. The length is checked
    before `int()`, so a huge input costs nothing and never reaches `int()`'s 4300-digit limit (a
    ValueError, which the gateway would answer 500)."""
    if len(raw) > len(str(high)) or _DECIMAL.fullmatch(raw) is None:
        return None
    value = int(raw)
    return value if low <= value <= high else None


def read_decimal(value: str) -> int | None:
    """A count or token the gateway sent (0..10**19-1), None if not plain ASCII decimal."""
    return parse_decimal(value, low=0, high=MAX_READ)


def int_header(headers: Mapping[str, str], name: str) -> int | None:
    """`read_decimal` of a header the gateway sent; None if absent."""
    return read_decimal(headers.get(name, ""))


def token_header(token: object) -> str:
    """`Fencing-Token` for `token`: an `int` in 1..2^63-1, else `ConfigurationError` (nothing sent).

    The gateway refuses any other value, but a `bool` (`True`), a `float` or a `str` would otherwise be
    sent as its text (`"True"`, `"1.5"`, `"12 ; x"`), and a value outside the range has no meaning."""
    if not isinstance(token, int) or isinstance(token, bool) or not 1 <= token <= MAX_TOKEN:
        raise ConfigurationError(
            f"token must be an int from 1 to 2**63-1, got {token!r} ({type(token).__name__}): "
            "pass the lease (lease=) or the token it was granted"
        )
    return str(token)


def resource_header(resource: object) -> str:
    """`Fencing-Resource` for `resource` if the API can read it, else `ConfigurationError` (nothing sent):
    an empty name, a comma, a space or a control character (CR, LF, NUL) is no name of the API."""
    if not isinstance(resource, str) or not resource:
        raise ConfigurationError(f"resource must be a non-empty string, got {resource!r}")
    if len(resource) > MAX_RESOURCE_LENGTH or _HEADER_RESOURCE.fullmatch(resource) is None:
        raise ConfigurationError(
            f"resource {resource[:80]!r} cannot be sent to the gateway: it takes at most "
            f"{MAX_RESOURCE_LENGTH} characters of letters, digits and _.~:@=+%- in segments separated by "
            "single slashes, with no '.' or '..' segment; name the lock that way"
        )
    return resource


def idempotency_key_header(key: object) -> str:
    """`Idempotency-Key` for `key` if the API reads it, else `ConfigurationError` (nothing sent)."""
    if not isinstance(key, str) or _IDEMPOTENCY_KEY.fullmatch(key) is None:
        raise ConfigurationError(
            f"idempotency_key {key!r} must be 1..{MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters "
            "without spaces or commas: a UUID is a good choice"
        )
    return key


def if_match_header(tag: object) -> str:
    """`If-Match` for `tag` (one strong ETag as a read answered it, or "*"), else `ConfigurationError`."""
    if not isinstance(tag, str) or (tag != "*" and _STRONG_TAG.fullmatch(tag) is None):
        raise ConfigurationError(
            f'if_match {tag!r} must be one strong ETag as a read answered it ("..."), or "*"'
        )
    return tag


def in_path(what: str, name: object) -> str:
    """`name` (a key or resource) percent-encoded for a URL path, every `/` kept as a separator.

    Refused (`ConfigurationError`, nothing sent) unless a non-empty `str` without a `.` or `..`
    segment: URLs resolve dot segments (RFC 3986), so `cl/x/../victim` would name `cl/victim`.
    """
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"{what} must be a non-empty string, got {name!r}")
    if any(segment in (".", "..") for segment in name.split("/")):
        raise ConfigurationError(
            f"{what} {name!r} has a '.' or '..' segment: in a URL it would name another object "
            f"(dot segments are resolved), and the gateway refuses such names; give the {what} itself, "
            "without them"
        )
    return quote(name, safe="/")
