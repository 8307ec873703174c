"""Header and key validation: bad input gets a clear 400 (or 428) before anything is touched.

Fencing-Token is a decimal integer in 1..2**63-1 (the signed 64-bit range of
the BIGINT mark), written without sign, spaces or leading zeros, so one token
has one spelling. Keys and resources are printable ASCII path-like names with
no empty, `.` or `..` segment, so they mean the same to every store.
"""

from __future__ import annotations

import re

from gateway.errors import BadRequest, TokenRequired
from storage.models import (
    DEFAULT_CONTENT_TYPE,
    MAX_CONTENT_TYPE_LENGTH,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_KEY_LENGTH,
    MAX_RESOURCE_LENGTH,
)

MAX_TOKEN = 2**63 - 1
MAX_LIST_LIMIT = 1000
_TOKEN = re.compile(r"[1-9][0-9]{0,18}")
_IDEMPOTENCY_KEY = re.compile(rf"[!-~]{{1,{MAX_IDEMPOTENCY_KEY_LENGTH}}}")
_NAME = re.compile(r"[A-Za-z0-9_.~:@=+,%-]+(?:/[A-Za-z0-9_.~:@=+,%-]+)*")


def parse_token(raw: str | None, *, required: bool) -> int | None:
    """The token of a `Fencing-Token` header; 428 if a write has none, 400 if malformed."""
    if raw is None:
        if required:
            raise TokenRequired(
                "this request changes storage and needs a `Fencing-Token` header: take the lock and send "
                "its token"
            )
        return None
    if _TOKEN.fullmatch(raw) is None or int(raw) > MAX_TOKEN:
        raise BadRequest(
            f"Fencing-Token {raw[:40]!r} is not a decimal integer in 1..{MAX_TOKEN} (no sign, spaces or "
            "leading zeros)"
        )
    return int(raw)


def token_or_none(raw: str | None) -> int | None:
    """The token of a header if it is well formed, else None (for logs and the audit trail)."""
    if raw is None or _TOKEN.fullmatch(raw) is None or int(raw) > MAX_TOKEN:
        return None
    return int(raw)


def parse_idempotency_key(raw: str | None) -> str | None:
    """The `Idempotency-Key` header: 1..128 printable ASCII characters without spaces, or absent."""
    if raw is None:
        return None
    if _IDEMPOTENCY_KEY.fullmatch(raw) is None:
        raise BadRequest(
            f"Idempotency-Key {raw[:40]!r} must be 1..{MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII "
            "characters without spaces; a UUID is a good choice"
        )
    return raw


def parse_content_type(raw: str | None) -> str:
    """The `Content-Type` a writer sent, kept with the object and sent back on GET; default octet-stream."""
    if raw is None or not raw.strip():
        return DEFAULT_CONTENT_TYPE
    if len(raw) > MAX_CONTENT_TYPE_LENGTH or not (raw.isascii() and raw.isprintable()) or "/" not in raw:
        raise BadRequest(
            f"Content-Type {raw[:40]!r} must be a media type (type/subtype, optional parameters) of at most "
            f"{MAX_CONTENT_TYPE_LENGTH} printable ASCII characters"
        )
    return raw.strip()


def _check_name(what: str, value: str, limit: int) -> str:
    if len(value) > limit:
        raise BadRequest(f"{what} is {len(value)} characters long; the limit is {limit}")
    if _NAME.fullmatch(value) is None or any(seg in (".", "..") for seg in value.split("/")):
        raise BadRequest(
            f"{what} {value[:80]!r} is not valid: use letters, digits and _.~:@=+,%- in segments separated "
            "by single slashes, with no '.' or '..' segment"
        )
    return value


def parse_key(raw: str) -> str:
    return _check_name("key", raw, MAX_KEY_LENGTH)


def parse_resource(raw: str | None, *, key: str) -> str:
    """The `Fencing-Resource` header, defaulting to the object key."""
    if raw is None:
        return _check_name("resource (the key)", key, MAX_RESOURCE_LENGTH)
    return _check_name("Fencing-Resource", raw, MAX_RESOURCE_LENGTH)


def parse_limit(raw: str | None) -> int:
    if raw is None:
        return MAX_LIST_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIST_LIMIT:
        raise BadRequest(f"limit {raw[:20]!r} must be an integer in 1..{MAX_LIST_LIMIT}")
    return int(raw)


def parse_prefix(raw: str | None) -> str:
    prefix = raw or ""
    if len(prefix) > MAX_KEY_LENGTH or not prefix.isprintable() or not prefix.isascii():
        raise BadRequest(f"prefix must be printable ASCII of at most {MAX_KEY_LENGTH} characters")
    return prefix
