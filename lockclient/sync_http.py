"""`GatewayClient` for code without an event loop: the async client, run on a private loop thread.

As `lockclient.sync.Redlock` does for the lock: one implementation, the async
`lockclient.http.GatewayClient`, driven from a daemon thread that owns its
event loop and its connections. Calls block the caller; errors, retries and
`Idempotency-Key`s are the async client's. An `on_send` hook is called on
that private loop thread, not the caller's: it must not block, and what it
shares with the caller needs a lock (a `list.append` is safe).

    with GatewayClient("http://127.0.0.1:8080") as gateway:
        gateway.put("reports/q1", b"v3", lease=lease)
"""

from __future__ import annotations

from types import TracebackType
from typing import TypedDict, Unpack

from lockclient import http
from lockclient._loop import LoopThread
from lockclient.gateway_retry import GatewayRetry
from lockclient.gateway_tls import TLSPath
from lockclient.gateway_types import Fencing, FetchedObject, ObjectInfo, OnSend, WriteOptions

__all__ = ["GatewayClient", "GatewayOptions"]


class GatewayOptions(TypedDict, total=False):
    """The keywords of `lockclient.GatewayClient` but `session`; same meanings, same defaults."""

    api_key: str | None
    timeout: float
    ssl_ca_certs: TLSPath | None
    ssl_certfile: TLSPath | None
    ssl_keyfile: TLSPath | None
    retry: GatewayRetry | None
    on_send: OnSend | None  # called on the private loop thread, once per send


class GatewayClient:
    """Blocking twin of `lockclient.GatewayClient`; `close()` (or leaving `with`) stops its thread."""

    def __init__(self, base_url: str, **options: Unpack[GatewayOptions]) -> None:
        self._async = http.GatewayClient(base_url, **options)  # checks the arguments before a thread starts
        self._thread = LoopThread("lockclient-gateway", owner="lockclient.sync.GatewayClient")
        self._run = self._thread.run

    @property
    def async_client(self) -> http.GatewayClient:
        """The async client doing the work (use it only through its loop)."""
        return self._async

    def put(self, key: str, data: bytes, **options: Unpack[WriteOptions]) -> ObjectInfo:
        """As `lockclient.GatewayClient.put`."""
        return self._run(lambda: self._async.put(key, data, **options))

    def get(self, key: str, **fencing: Unpack[Fencing]) -> FetchedObject:
        """As `lockclient.GatewayClient.get`: a missing key raises `NotFound`."""
        return self._run(lambda: self._async.get(key, **fencing))

    def delete(self, key: str, **options: Unpack[WriteOptions]) -> ObjectInfo:
        """As `lockclient.GatewayClient.delete`."""
        return self._run(lambda: self._async.delete(key, **options))

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """As `lockclient.GatewayClient.list`."""
        return self._run(lambda: self._async.list(prefix))

    def fence(self, resource: str) -> int:
        """As `lockclient.GatewayClient.fence`."""
        return self._run(lambda: self._async.fence(resource))

    def close(self) -> None:
        """Close the connections, then stop the thread."""
        self._thread.close(self._async.aclose)

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
