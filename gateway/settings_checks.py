"""The cross-checks of the gateway's settings that read more than one value or another module.

A storage URL the engine could not open, an upstream that is not http(s), an
s3:// upstream's endpoint, `--upstream-ordering` and the upstream's TLS files
are refused here, with a message that says the fix, before the gateway opens
or logs anything. `Settings` runs them when it is built; they import what they
check against (SQLAlchemy, aiohttp) only once there is a value to check, so
`fencegate serve --help` stays light.
"""

from __future__ import annotations

from pathlib import Path

from gateway.errors import BadSetting
from gateway.s3url import is_s3_url, parse_s3_url

SHOWN = 40  # characters of a bad value an error message repeats
# What an http(s) upstream's mode relies on for the order of the writes it applies. `conditional`: the
# upstream's own compare-and-swap on its strong ETags (RFC 9110 If-Match / If-None-Match: *), probed at
# start; `trust-path`: the upstream applies whatever arrives, so the order is the path's to keep.
CONDITIONAL = "conditional"
UPSTREAM_ORDERINGS = (CONDITIONAL, "trust-path")


def check_storage_url(url: str) -> None:
    """Refuse a storage URL the storage cannot open, before anything starts or is logged."""
    from lockclient.transport.endpoint import redact
    from storage.engine import normalize_url  # loads SQLAlchemy: only once there is a URL to check
    from storage.errors import BadStorageURL

    try:
        normalize_url(url)
    except BadStorageURL as exc:
        raise BadSetting(f"storage {redact(url)!r}: {exc}") from None


def check_upstream_url(url: str) -> None:
    """Refuse an upstream the proxy could never reach: not http(s), no host, a port that cannot be."""
    from lockclient.transport.endpoint import is_http_url, redact  # one check, one mask for URLs

    if not is_http_url(url):
        raise BadSetting(
            f"upstream {redact(url)!r} is not an http(s) URL with a host (and a port from 1 to 65535); "
            "e.g. http://10.0.0.5:9000/store"
        )


def check_s3_upstream(upstream: str | None, endpoint: str | None) -> None:
    """Refuse a malformed s3:// upstream, or `--upstream-endpoint` without one or not http(s)."""
    from lockclient.transport.endpoint import is_http_url, redact

    if upstream is not None and is_s3_url(upstream):
        parse_s3_url(upstream)
    if endpoint is None:
        return
    if upstream is None or not is_s3_url(upstream):
        raise BadSetting(
            "--upstream-endpoint names the store of an s3:// upstream: give --upstream s3://BUCKET too, or "
            "drop --upstream-endpoint"
        )
    if not is_http_url(endpoint):
        raise BadSetting(
            f"upstream endpoint {short(redact(endpoint))!r} is not an http(s) URL with a host (and a port "
            "from 1 to 65535); e.g. http://127.0.0.1:8333"
        )


def check_upstream_ordering(upstream: str | None, ordering: str | None) -> None:
    """Refuse an http(s) upstream without `--upstream-ordering` (the unconditional mode is taken only by
    its name), a value that is not one, and the setting without an upstream."""
    from urllib.parse import urlsplit

    from lockclient.transport.endpoint import redact

    if ordering is not None and ordering not in UPSTREAM_ORDERINGS:
        raise BadSetting(
            f"--upstream-ordering {short(ordering)!r} is not one of {', '.join(UPSTREAM_ORDERINGS)}"
        )
    if upstream is None:
        if ordering is not None:
            raise BadSetting(
                f"--upstream-ordering {ordering} needs proxy mode: give --upstream URL too, or drop it"
            )
        return
    if ordering is not None and is_s3_url(upstream):
        raise BadSetting(
            f"--upstream-ordering {ordering} is for an http(s) upstream; an s3:// upstream is "
            "always fenced by the store's conditional writes: drop --upstream-ordering"
        )
    if ordering is None and urlsplit(upstream).scheme in ("http", "https"):
        raise BadSetting(
            f"upstream {redact(upstream)!r} applies whatever the gateway forwards, unconditionally: safe "
            "only while the path to it never delays or reorders a request (one that timed out may land "
            "after a newer token's) and one gateway forwards to it; give --upstream-ordering trust-path "
            "to run it so (one replica per database), or --upstream-ordering conditional if the upstream "
            "does conditional PUTs on strong ETags (RFC 9110), so it refuses a stale write itself"
        )


def check_upstream_tls(ca: Path | None, cert: Path | None, key: Path | None, *, upstream: str | None) -> None:
    """Refuse `--upstream-ca` or `--upstream-cert`/`--upstream-key` without an https upstream, or files
    that do not load. They are read here, as `--tls-client-ca` is before serving, so a bad file is one
    line before anything is logged; the proxy reads them again when it opens its session."""
    from urllib.parse import urlsplit

    if upstream is None or urlsplit(upstream).scheme != "https":
        flags = [
            flag
            for flag, path in (("--upstream-ca", ca), ("--upstream-cert", cert), ("--upstream-key", key))
            if path is not None
        ]
        given = " and ".join([", ".join(flags[:-1]), flags[-1]] if len(flags) > 1 else flags)
        need = "needs" if len(flags) == 1 else "need"
        raise BadSetting(
            f"{given} {need} an https upstream: give --upstream https://HOST/... too (a plain http "
            f"upstream has no certificate to check and takes none), or drop {given}"
        )
    from gateway.tls import upstream_context  # loads aiohttp: only once there is a file to check

    upstream_context(ca, cert, key)


def short(value: object) -> str:
    """`value` as a message repeats it: masked (a URL given to a number's flag may hold a password), at
    most SHOWN characters, so a pasted megabyte stays one line."""
    from lockclient.transport.endpoint import redact

    text = str(value)
    text = redact(text) if "@" in text else text
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


def too_big(most: int) -> str:
    """The end of a message for a number past the most its setting takes (refused, not clamped)."""
    return f"is out of range; give at most {most}"
