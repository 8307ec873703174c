"""The lab's `Deployment` with the counter in a real S3 store behind two gateway replicas.

Two `fencegate serve --upstream s3://BUCKET/PREFIX` processes share the
session's PostgreSQL (their marks) and its SeaweedFS (the objects). Replica
A reaches SeaweedFS through a `DelayProxy` of its own, the path the
`proxy-delay` scenario holds; replica B reaches it directly. The holder
(`c1`) sends through A, every other client through B, so the holder's write
can leave its replica in time and meet the store after a challenger's.

| store | replicas | each write the store gets |
|---|---|---|
| `s3` | `fencegate serve` | `If-Match` on the ETag checked (`If-None-Match: *`: new key) |
| `s3-unconditional` | `python -m fencegate.lab.unconditional_serve` | the same, no preconditions |

The lock half is the gateway deployment's (`Locks`), and so is the seed (a
write of 0 through replica B). `final` reads the object from SeaweedFS
itself with aiobotocore, never through a gateway: its bytes are the value the
checker compares with the acknowledged increments, and the token it carries
(`final_token`) is reported beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from fencegate.lab.deployments import GatewayDeployment
from fencegate.lab.errors import LabError, StoreError
from fencegate.lab.faults.proxy import DelayProxy
from fencegate.lab.gateway_process import AsyncGatewayProcess
from fencegate.lab.gateway_store import TIMEOUT
from fencegate.lab.predictions import PROXY_STORES, UNCONDITIONAL
from fencegate.lab.protocols import Component
from fencegate.lab.scenarios.stage import HOLDER
from gateway.transport import TOKEN
from lockclient import GatewayClient

if TYPE_CHECKING:
    from aiobotocore.session import ClientCreatorContext
    from types_aiobotocore_s3 import S3Client

# Well past the longest hold (the stage waits at most 30 s for the challenger): the held write is
# answered, never timed out, so its 2xx or 409 is in the history.
UPSTREAM_TIMEOUT = 60.0
MODULES = {"s3": "fencegate.cli", UNCONDITIONAL: "fencegate.lab.unconditional_serve"}


@dataclass
class ProxyDeployment:
    """One run's two replicas in front of the S3 store; the held path is replica A's."""

    gateway: GatewayDeployment  # replica B's: the lock, the seed, where the challengers send
    replica_a: tuple[str, int]
    path: DelayProxy
    s3: Mapping[str, str]  # the store's endpoint, identity, bucket and region (the cluster's endpoints)
    object_key: str  # the counter's key in the bucket, prefix included
    final_token: int | None = None

    @property
    def lock_nodes(self) -> int:
        return self.gateway.lock_nodes

    @property
    def store_address(self) -> tuple[str, int]:
        return self.gateway.gateway

    @property
    def resource(self) -> str:
        return self.gateway.resource

    def address_for(self, client: str) -> tuple[str, int]:
        """The replica `client` sends to: A (the held path) for the holder, B for the others."""
        return self.replica_a if client == HOLDER else self.gateway.gateway

    def hold_path(self, seconds: float) -> None:
        """Hold replica A's requests to the store this long (0: let them through)."""
        self.path.hold(seconds)

    async def delete(self, token: int) -> None:
        async with self._client() as client:
            await client.delete(self.gateway.key, token=token, resource=self.resource)

    async def recreate(self, value: int, token: int) -> None:
        async with self._client() as client:
            await client.put(self.gateway.key, str(value).encode(), token=token, resource=self.resource)

    def _client(self) -> GatewayClient:
        """Replica B's client; no Idempotency-Key, which proxy mode refuses."""
        host, port = self.gateway.gateway
        return GatewayClient(f"http://{host}:{port}", timeout=TIMEOUT, retry=None)

    def lock(self, urls: Sequence[str], *, tokens: str) -> Component:
        return self.gateway.lock(urls, tokens=tokens)

    def store(self, address: tuple[str, int]) -> Component:
        url = f"http://{address[0]}:{address[1]}"
        kwargs = {"url": url, "key": self.gateway.key, "resource": self.resource}
        return Component("fencegate.lab.proxy_store:counter", kwargs)

    async def seed(self) -> None:
        await self.gateway.seed()

    async def final(self) -> int:
        """The value the store itself holds (its bytes), read with aiobotocore; its token is kept."""
        try:
            async with _client(self.s3) as client:
                found = await client.get_object(Bucket=self.s3["bucket"], Key=self.object_key)
                async with found["Body"] as body:
                    data = await body.read()
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"final read of {self.object_key} from the store: {type(exc).__name__}") from exc
        raw = found.get("Metadata", {}).get(TOKEN)
        self.final_token = int(raw) if raw is not None and raw.isdigit() else None
        try:
            return int(data.decode())
        except ValueError as exc:
            raise StoreError(f"the store holds {data[:40]!r} under {self.object_key}, not a number") from exc


def _client(s3: Mapping[str, str]) -> ClientCreatorContext[S3Client]:
    return get_session().create_client(
        "s3",
        endpoint_url=s3["endpoint"],
        region_name=s3["region"],
        aws_access_key_id=s3["access_key"],
        aws_secret_access_key=s3["secret_key"],
    )


def aws_environment(s3: Mapping[str, str], home: Path) -> dict[str, str]:
    """This process's environment with the store's identity and nothing from ~/.aws or other AWS_*."""
    kept = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    return {
        **kept,
        "AWS_ACCESS_KEY_ID": s3["access_key"],
        "AWS_SECRET_ACCESS_KEY": s3["secret_key"],
        "AWS_REGION": s3["region"],
        "AWS_CONFIG_FILE": str(home / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
    }


@contextlib.asynccontextmanager
async def running(
    gateway: GatewayDeployment, store_name: str, *, s3: Mapping[str, str], dsn: str, workdir: Path
) -> AsyncIterator[ProxyDeployment]:
    """Start the path proxy and both replicas for one run (`gateway.gateway` is replaced by replica B's
    address); stop all of it on the way out."""
    if store_name not in PROXY_STORES:
        raise LabError(f"unknown s3 store {store_name!r}: use one of {', '.join(PROXY_STORES)}")
    endpoint = urlsplit(s3["endpoint"])
    if endpoint.hostname is None or endpoint.port is None:
        raise LabError(f"the store's endpoint {s3['endpoint']!r} has no host:port")
    prefix = f"{gateway.resource}/"
    env = aws_environment(s3, workdir)
    common = ["--storage", dsn, "--upstream", f"s3://{s3['bucket']}/{prefix}",
              "--upstream-timeout", str(UPSTREAM_TIMEOUT)]  # fmt: skip
    async with DelayProxy(endpoint.hostname, endpoint.port) as path:
        a = AsyncGatewayProcess(
            workdir / "replica-a", module=MODULES[store_name], env=env,
            args=[*common, "--upstream-endpoint", f"http://127.0.0.1:{path.port}"],
        )  # fmt: skip
        b = AsyncGatewayProcess(
            workdir / "replica-b", module=MODULES[store_name], env=env,
            args=[*common, "--upstream-endpoint", s3["endpoint"]],
        )  # fmt: skip
        try:
            await a.start()
            await b.start()
            b_side = GatewayDeployment(
                mode=gateway.mode, design=gateway.design, gateway=b.address, key=gateway.key,
                resource=gateway.resource, tokens=gateway.tokens, lock_url=gateway.lock_url, proxied=True,
            )  # fmt: skip
            yield ProxyDeployment(b_side, a.address, path, s3, prefix + gateway.key)
        finally:
            path.hold(0)
            await asyncio.shield(asyncio.gather(a.stop(), b.stop()))


__all__ = ["MODULES", "ProxyDeployment", "aws_environment", "running"]
