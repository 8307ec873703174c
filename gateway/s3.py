"""The S3 transport of the conditional proxy: aiobotocore, imported here and nowhere else.

Endpoint, region and credentials come the way AWS tools take them, through
botocore's own session: the environment (`AWS_ACCESS_KEY_ID`, `AWS_PROFILE`,
`AWS_REGION`, ...), the shared config and credentials files, then instance
roles; `--upstream-endpoint` names a non-AWS store (path-style addressing).
No region anywhere means us-east-1, which S3-compatible stores accept.

Every driver error is mapped once, in `_mapped`, to the gateway's: 412 (and
409 ConditionalRequestConflict, AWS's answer to a race) is
`VersionChanged`; 503 or a connection that could not be made is 503
`upstream_unavailable` (nothing was applied); no answer in `timeout`, or a
connection that failed once made, is 504 `upstream_timeout` (the outcome
is unknown: SeaweedFS, for one, leaves some of many concurrent conditional
PUTs on one key unanswered for seconds); anything else the store answers, or an answer the client cannot
parse, is 502 `upstream_failed`. The driver's text goes to the log only
(the middleware answers a 5xx with a fixed message). botocore's own retries
are off: the conditional algorithm decides what a retry may do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from botocore.handlers import add_expect_header

from gateway.errors import BadSetting, Refusal, Unavailable, UpstreamFailed, UpstreamTimeout
from gateway.s3url import S3Location
from gateway.transport import Listed, Version, VersionChanged, version_of

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

log = logging.getLogger("gateway.upstream")

DEFAULT_REGION = "us-east-1"
POOL_CONNECTIONS = 64  # connections to the store per replica: the probe alone sends 32 writes at once
_RACE_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})


class S3Transport:
    """`gateway.transport.Transport` over one bucket and prefix.

    `conditional=False` drops the preconditions from every write: the control
    the tests run to show their check catches an unfenced store. No flag or
    variable reaches it.
    """

    def __init__(
        self, client: S3Client, location: S3Location, *, timeout: float, conditional: bool = True
    ) -> None:
        self._client = client
        self._location = location
        self._timeout = timeout
        self._conditional = conditional
        self.where = str(location)
        self.keeps_metadata = True  # user metadata (x-amz-meta-*) comes back on HEAD and GET

    def send_bodies_at_once(self) -> None:
        """From now on, writes go without `Expect: 100-continue` (`send_bodies_at_once` below): the
        gateway's own writes, once the probe passed. The probe itself runs on botocore's defaults, the
        client its checks were made against."""
        send_bodies_at_once(self._client)

    def _key(self, key: str) -> str:
        return self._location.prefix + key

    async def head(self, key: str) -> Version | None:
        try:
            async with self._mapped("HEAD", key):
                found = await self._client.head_object(Bucket=self._location.bucket, Key=self._key(key))
                return self._version(key, found)
        except _Missing:
            return None

    async def get(self, key: str) -> tuple[Version, bytes] | None:
        try:
            async with self._mapped("GET", key):
                found = await self._client.get_object(Bucket=self._location.bucket, Key=self._key(key))
                async with found["Body"] as body:
                    data = await body.read()
                return self._version(key, found), data
        except _Missing:
            return None

    async def put_if(
        self, key: str, data: bytes, *, content_type: str, metadata: Mapping[str, str], match: str | None
    ) -> str:
        condition: dict[str, str] = {}
        if self._conditional:
            condition = {"IfNoneMatch": "*"} if match is None else {"IfMatch": match}
        async with self._mapped("PUT", key):
            answer = await self._client.put_object(
                Bucket=self._location.bucket, Key=self._key(key), Body=data, ContentType=content_type,
                Metadata=dict(metadata), **condition,  # type: ignore[arg-type]
            )  # fmt: skip
            return answer["ETag"]  # a 2xx without one is garbage: KeyError, mapped to 502

    async def delete_if(self, key: str, *, match: str) -> None:
        async with self._mapped("DELETE", key):
            await self._client.delete_object(Bucket=self._location.bucket, Key=self._key(key), IfMatch=match)

    async def list(self, prefix: str, *, after: str, limit: int) -> list[Listed]:
        # StartAfter '' would mean "from the start" too, but some stores refuse an empty one
        start = self._key(after) if after else self._location.prefix
        async with self._mapped("LIST", prefix):
            page = await self._client.list_objects_v2(
                Bucket=self._location.bucket, Prefix=self._key(prefix), MaxKeys=limit, StartAfter=start
            )
        cut = len(self._location.prefix)
        return [
            Listed(item["Key"][cut:], item["ETag"], item["Size"])
            for item in page.get("Contents", [])
            if item["Key"].startswith(self._location.prefix)
        ]

    async def check_bucket(self) -> None:
        """Refuse at start a bucket the credentials cannot reach: one line, the store's status only."""
        try:
            async with self._mapped("HEAD", ""):
                await self._client.head_bucket(Bucket=self._location.bucket)
        except _Missing:
            raise BadSetting(f"upstream {self.where}: the store has no bucket by that name") from None
        except Refusal as exc:
            status = exc.fields.get("upstream_status")
            if status == "403":
                why = (
                    "the store refused the gateway's credentials (403): check the access key and secret "
                    "(environment or AWS config files) and the bucket policy"
                )
            elif exc.code == "upstream_unavailable":
                why = "the store is unreachable; check --upstream-endpoint (or the region) and the network"
            elif exc.code == "upstream_timeout":
                why = f"the store did not answer within {self._timeout}s"
            else:
                why = f"the store did not serve the bucket ({exc.code}, status {status or 'none'})"
            raise BadSetting(f"upstream {self.where}: {why}") from None

    def _version(self, key: str, found: Mapping[str, Any]) -> Version:
        return version_of(
            found["ETag"], found.get("Metadata", {}), size=int(found.get("ContentLength", 0)),
            content_type=found.get("ContentType") or "application/octet-stream", key=key, where=self.where,
        )  # fmt: skip

    @contextlib.asynccontextmanager
    async def _mapped(self, method: str, key: str) -> AsyncIterator[None]:
        """The one boundary where the driver's errors become the gateway's (module docstring)."""
        fields: dict[str, object] = {"upstream": self.where, "key": key}
        try:
            async with asyncio.timeout(self._timeout):
                yield
        except ClientError as exc:
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if status == 404 and method in ("HEAD", "GET") and code != "NoSuchBucket":
                raise _Missing from None
            if code == "NoSuchBucket" or (status == 404 and method == "HEAD" and not key):
                raise _Missing from None
            if status == 412 or code in _RACE_CODES:
                raise VersionChanged(f"{method} {key!r}: {code or status}") from None
            fields["upstream_status"] = str(status)
            if status == 503:
                raise Unavailable(
                    f"the store answered {method} {key!r} 503 ({code})", code="upstream_unavailable",
                    fields=fields,
                ) from exc  # fmt: skip
            raise UpstreamFailed(
                f"the store answered {method} {key!r} {status} ({code})", fields=fields
            ) from exc
        except (EndpointConnectionError, ConnectTimeoutError, aiohttp.ClientConnectorError) as exc:
            # no connection was made: nothing of the request reached the store
            raise Unavailable(
                f"the store is unreachable ({type(exc).__name__}); {method} {key!r} was not applied",
                code="upstream_unavailable", fields=fields,
            ) from exc  # fmt: skip
        except (
            ReadTimeoutError,
            ConnectionClosedError,
            TimeoutError,
            aiohttp.ClientConnectionError,
            OSError,
        ) as exc:
            # sent, perhaps received and applied, but not answered: the outcome is unknown (TimeoutError is
            # an OSError, and so is every socket error after the connection was made)
            raise UpstreamTimeout(
                f"the store did not answer {method} {key!r} within {self._timeout}s ({type(exc).__name__}); "
                "its outcome is unknown",
                fields=fields,
            ) from exc
        except (BotoCoreError, aiohttp.ClientError, ValueError, KeyError) as exc:
            raise UpstreamFailed(
                f"the store's answer to {method} {key!r} could not be read ({type(exc).__name__}: {exc})",
                fields=fields,
            ) from exc


class _Missing(Exception):
    """The key (or the bucket) is not there: a 404 the calls turn into None."""


@contextlib.asynccontextmanager
async def open_s3(
    location: S3Location, *, endpoint: str | None, call_timeout: float, conditional: bool = True
) -> AsyncIterator[S3Transport]:
    """The transport over one client, its credentials found by botocore and the bucket checked; the
    client closes on exit. Missing credentials, or a bucket they cannot reach, is a BadSetting."""
    session = get_session()
    with _no_driver_text(location):
        credentials = await session.get_credentials()
    if credentials is None:
        raise BadSetting(
            f"upstream {location}: no AWS credentials found; set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with a shared credentials file"
        )
    region = session.get_config_variable("region") or DEFAULT_REGION
    config = client_config(timeout=call_timeout, pool=POOL_CONNECTIONS, path_style=endpoint is not None)
    async with session.create_client(
        "s3", region_name=region, endpoint_url=endpoint, config=config
    ) as client:
        transport = S3Transport(client, location, timeout=call_timeout, conditional=conditional)
        await transport.check_bucket()
        yield transport


def client_config(*, timeout: float, pool: int, path_style: bool) -> AioConfig:
    """The client's settings: botocore's own retries off (module docstring), the call's timeout, path-style
    addressing for a non-AWS endpoint. The proxy bench's direct client takes them too."""
    return AioConfig(
        connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 1},
        max_pool_connections=pool, s3={"addressing_style": "path"} if path_style else {},
    )  # fmt: skip


def send_bodies_at_once(client: S3Client) -> None:
    """No `Expect: 100-continue` on writes. botocore adds it to every PUT whose body is file-like (it
    makes every body one), so each write waits a round trip for the store's 100 before its body goes;
    the gateway already holds the whole body (within its body limit). The price: a body the store then
    refuses (412, after a stale cache or a write in between) is sent in full."""
    client.meta.events.unregister("before-call.s3", add_expect_header)


@contextlib.contextmanager
def _no_driver_text(location: S3Location) -> Iterator[None]:
    """A malformed AWS config file is a bad setting: one line naming the fix, not botocore's text."""
    try:
        yield
    except BotoCoreError as exc:
        log.error("AWS configuration not readable: %s", exc)
        raise BadSetting(
            f"upstream {location}: the AWS config or credentials file cannot be read ({type(exc).__name__})"
        ) from None
