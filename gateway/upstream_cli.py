"""`fencegate upstream check URL`: the start-up probe of an s3:// or http(s) upstream, every check printed.

The URL, the endpoint and the timeout are checked as `serve` checks them
(`gateway.config.Settings`), so a bad one gets the same one line and exit 2. An http(s) upstream's
versions are recorded in a scratch SQLite database, removed at the end (the
probe's `metadata` check reads them back as a gateway would).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from gateway.config import Settings
from gateway.probe import Check, probe
from gateway.s3url import is_s3_url, parse_s3_url
from gateway.settings_checks import CONDITIONAL
from gateway.settings_cli import settings_from


async def _http_checks(settings: Settings) -> tuple[str, list[Check]]:
    import aiohttp

    from gateway.contexts import migrate_storage
    from gateway.http_transport import HttpTransport
    from gateway.storage_tls import open_storage

    assert settings.upstream is not None
    with tempfile.TemporaryDirectory(prefix="fencegate-probe-") as scratch:
        url = f"sqlite:///{Path(scratch) / 'versions.db'}"
        await migrate_storage(url)
        engine = open_storage(url)
        try:
            async with aiohttp.ClientSession() as session:
                transport = HttpTransport(
                    session=session, base_url=settings.upstream, engine=engine,
                    timeout=settings.upstream_timeout,
                )  # fmt: skip
                return transport.where, await probe(transport)
        finally:
            await engine.dispose()


async def _checks(settings: Settings) -> tuple[str, list[Check]]:
    from gateway.s3 import open_s3  # aiobotocore: only once the arguments are good

    assert settings.upstream is not None
    if not is_s3_url(settings.upstream):
        return await _http_checks(settings)
    location = parse_s3_url(settings.upstream)
    async with open_s3(
        location, endpoint=settings.upstream_endpoint, call_timeout=settings.upstream_timeout
    ) as transport:
        return transport.where, await probe(transport)


def run(args: argparse.Namespace) -> int:
    namespace = argparse.Namespace(
        upstream=args.url, upstream_endpoint=args.upstream_endpoint, upstream_timeout=args.upstream_timeout,
        upstream_ordering=None if is_s3_url(args.url) else CONDITIONAL,
    )  # fmt: skip
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
