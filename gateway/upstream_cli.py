"""`fencegate upstream check URL`: the start-up probe of an s3:// upstream, every check printed.

The URL, the endpoint and the timeout are checked as `serve` checks them
(`gateway.config.Settings`), so a bad one gets the same one line and exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from gateway.config import Settings, settings_from
from gateway.errors import ConfigurationError
from gateway.probe import Check, probe
from gateway.s3url import is_s3_url, parse_s3_url


async def _checks(settings: Settings) -> tuple[str, list[Check]]:
    from gateway.s3 import open_s3  # aiobotocore: only once the arguments are good

    assert settings.upstream is not None
    location = parse_s3_url(settings.upstream)
    async with open_s3(
        location, endpoint=settings.upstream_endpoint, call_timeout=settings.upstream_timeout
    ) as transport:
        return transport.where, await probe(transport)


def run(args: argparse.Namespace) -> int:
    if not is_s3_url(args.url):
        raise ConfigurationError(
            f"upstream check takes an s3:// URL (an http upstream has no probe yet), not {args.url[:80]!r}"
        )
    namespace = argparse.Namespace(
        upstream=args.url, upstream_endpoint=args.upstream_endpoint, upstream_timeout=args.upstream_timeout
    )
    settings = settings_from(namespace, {})  # one check for each value, as `serve` does it
    where, checks = asyncio.run(_checks(settings))
    passed = bool(checks) and all(check.passed for check in checks)
    if args.json:
        print(json.dumps({"upstream": where, "passed": passed, "checks": [c.as_json() for c in checks]}))
    else:
        for check in checks:
            print(f"{'pass' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
        print(f"upstream {where}: {'every check passed' if passed else 'FAILED'}")
    return 0 if passed else 1


__all__ = ["run"]
