"""`--upstream s3://BUCKET[/PREFIX]` and `--upstream-endpoint URL`, read and checked without the S3 client.

The settings check these before anything opens (a bad one is one line and
exit 2), so this module loads no botocore: `fencegate serve --help` and a
plain gateway stay light. A bucket name follows S3's rules for new buckets
(3 to 63 lowercase letters, digits, dots and hyphens, starting and ending
with a letter or digit), which every S3-compatible store accepts; the prefix
is printable ASCII, stored with one trailing `/`, so `s3://b/app` and
`s3://b/app/` name the same place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.errors import BadSetting

SCHEME = "s3://"
BUCKET_PATTERN = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
MAX_PREFIX = 512  # characters; S3 keys are at most 1024 bytes and the gateway's key goes after it
EXAMPLE = "e.g. s3://my-bucket or s3://my-bucket/fenced/"


@dataclass(frozen=True, slots=True)
class S3Location:
    """Where the proxied objects live: a bucket, and a prefix before every key ('' or ending in '/')."""

    bucket: str
    prefix: str

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}"


def is_s3_url(url: str) -> bool:
    """Whether `url` names an S3 upstream (its scheme only; `parse_s3_url` checks the rest)."""
    return url[: len(SCHEME)].lower() == SCHEME


def parse_s3_url(url: str) -> S3Location:
    """The bucket and prefix of `s3://BUCKET[/PREFIX]`; BadSetting naming the fault otherwise."""
    shown = url if len(url) <= 80 else url[:77] + "..."
    rest = url[len(SCHEME) :] if is_s3_url(url) else None
    if rest is None:
        raise BadSetting(f"upstream {shown!r} is not an s3:// URL; {EXAMPLE}")
    bucket, _, prefix = rest.partition("/")
    if "@" in bucket or ":" in bucket:
        raise BadSetting(
            f"upstream {SCHEME}...: the bucket may not carry a login or a port; credentials come from the "
            "environment or the AWS config files, the store's address from --upstream-endpoint"
        )
    if not BUCKET_PATTERN.fullmatch(bucket) or ".." in bucket:
        raise BadSetting(
            f"upstream {shown!r}: {bucket[:70]!r} is not a bucket name (3 to 63 lowercase letters, digits, "
            f"dots and hyphens, starting and ending with a letter or digit); {EXAMPLE}"
        )
    if len(prefix) > MAX_PREFIX or not (prefix.isascii() and prefix.isprintable()):
        raise BadSetting(
            f"upstream {shown!r}: the prefix must be printable ASCII of at most {MAX_PREFIX} characters"
        )
    if prefix.startswith("/") or "//" in prefix:
        raise BadSetting(f"upstream {shown!r}: the prefix has an empty path segment; {EXAMPLE}")
    if "?" in prefix or "#" in prefix:
        raise BadSetting(f"upstream {shown!r}: an s3:// URL takes no query or fragment; {EXAMPLE}")
    return S3Location(bucket, prefix.rstrip("/") + "/" if prefix else "")
