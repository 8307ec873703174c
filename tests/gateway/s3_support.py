"""What the s3:// proxy tests share: the AWS environment of the cluster's store, and a direct client.

The direct client is aiobotocore on the store itself, never through the
gateway: tests read what the store finally holds with it. `delayed_path` is
the lab's `DelayProxy` in front of the store, and `delayed_settings` a
gateway that reaches the store through it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pytest
from aiobotocore.session import get_session

from fencegate.lab.faults.proxy import DelayProxy
from gateway import Settings

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client


class Held(NamedTuple):
    """What the store holds under one key: bytes, ETag and the fencing metadata."""

    data: bytes
    etag: str
    metadata: dict[str, str]

    @property
    def token(self) -> int:
        return int(self.metadata["fencing-token"])


def aws_environment(store: dict[str, str], home: Path) -> dict[str, str]:
    """The variables that give botocore the store's identity and nothing from this machine's ~/.aws."""
    return {
        "AWS_ACCESS_KEY_ID": store["access_key"],
        "AWS_SECRET_ACCESS_KEY": store["secret_key"],
        "AWS_REGION": store["region"],
        "AWS_CONFIG_FILE": str(home / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
    }


def use_store(monkeypatch: pytest.MonkeyPatch, store: dict[str, str], home: Path) -> None:
    for name, value in aws_environment(store, home).items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)


@contextlib.asynccontextmanager
async def delayed_path(store: dict[str, str]) -> AsyncIterator[DelayProxy]:
    """The lab's `DelayProxy` in front of the store's endpoint."""
    host, port = store["endpoint"].removeprefix("http://").split(":")
    async with DelayProxy(host, int(port)) as proxy:
        yield proxy


def delayed_settings(
    store: dict[str, str], prefix: str, proxy: DelayProxy, tmp_path: Path, timeout: float
) -> Settings:
    """One gateway on SQLite in `tmp_path`, its path to the store through `proxy`."""
    return Settings(
        data_dir=tmp_path / "data", upstream=f"s3://{store['bucket']}/{prefix}",
        upstream_endpoint=f"http://127.0.0.1:{proxy.port}", upstream_timeout=timeout,
    )  # fmt: skip


def fresh_prefix() -> str:
    """A prefix of its own per test: the session's store is shared."""
    return f"t-{uuid.uuid4().hex[:12]}/"


@contextlib.asynccontextmanager
async def direct_client(store: dict[str, str]) -> AsyncIterator[S3Client]:
    session = get_session()
    async with session.create_client(
        "s3",
        endpoint_url=store["endpoint"],
        region_name=store["region"],
        aws_access_key_id=store["access_key"],
        aws_secret_access_key=store["secret_key"],
    ) as client:
        yield client


async def held(client: S3Client, bucket: str, key: str) -> Held | None:
    """What the store holds under `key` (the full S3 key), None if nothing."""
    from botocore.exceptions import ClientError

    try:
        found = await client.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None
        raise
    async with found["Body"] as body:
        data = await body.read()
    return Held(data, found["ETag"], dict(found.get("Metadata", {})))
