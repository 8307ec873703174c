"""The lab's counter on the real gateway: `CounterStore` over `lockclient.GatewayClient`.

One object (`key`) holds the counter as decimal text; `resource` is the lock's
name, sent as `Fencing-Resource`. The store's acceptance order (`seq`) is the
object's `version`, which the gateway bumps in the same transaction as each
accepted write, so the checker walks the writes in the order the store took
them. Reads carry no `seq`: a read changes no byte, and the writes alone show
every A, B, A at the store.

- `fenced`: every read and write carries the lease's token; a fenced read
  raises the mark, so a client that read under an old token cannot write a
  stale value. A refusal (409) is a reply, not an error.
- not fenced (`lock-only`): reads are plain GETs, and every write carries the
  same constant token, which the fence always accepts (equal tokens pass):
  the same store and code path, with the check made moot (docs/decisions.md).
"""

from __future__ import annotations

from fencegate.lab.errors import StoreError
from fencegate.lab.protocols import LeaseInfo, StoreReply
from lockclient import GatewayClient
from lockclient.errors import StaleToken

UNFENCED_TOKEN = 1  # every lock-only write carries it: equal tokens pass the fence, so nothing is refused
TIMEOUT = 10.0  # a request the lab's gateway does not answer in this long is an error, not a hang


class GatewayCounter:
    """The shared counter behind the gateway, fenced or not.

    `proxied`: the gateway is in proxy mode, which refuses `Idempotency-Key` (501), so each request is
    sent once, with no key (an unanswered one is an error, its outcome unknown).
    """

    def __init__(self, url: str, *, key: str, resource: str, fenced: bool, proxied: bool = False) -> None:
        once = {"retry": None} if proxied else {}
        self._client = GatewayClient(url, timeout=TIMEOUT, **once)
        self._key = key
        self._resource = resource
        self._fenced = fenced

    def _token(self, lease: LeaseInfo) -> int:
        if not self._fenced:
            return UNFENCED_TOKEN
        if lease.token is None:
            raise StoreError(f"fenced store: lease of {lease.resource} carries no token; draw one first")
        return lease.token

    async def read(self, lease: LeaseInfo) -> StoreReply:
        token = self._token(lease) if self._fenced else None
        try:
            found = await self._client.get(self._key, token=token, resource=self._resource)
        except StaleToken as exc:
            return StoreReply("refused", detail=f"stale token {exc.token} < {exc.highest}")
        return StoreReply("ok", value=_value(found.data))

    async def write(self, value: int, lease: LeaseInfo) -> StoreReply:
        try:
            info = await self._client.put(
                self._key, str(value).encode(), token=self._token(lease), resource=self._resource
            )
        except StaleToken as exc:
            return StoreReply("refused", detail=f"stale token {exc.token} < {exc.highest}")
        return StoreReply("ok", value=value, seq=info.version)

    async def final(self) -> int:
        return _value((await self._client.get(self._key)).data)

    async def seed(self, token: int = UNFENCED_TOKEN) -> None:
        """Create the counter at 0 before the clients start, so every read finds it."""
        await self._client.put(self._key, b"0", token=token, resource=self._resource)

    async def aclose(self) -> None:
        await self._client.aclose()


def _value(data: bytes) -> int:
    try:
        return int(data.decode())
    except ValueError as exc:
        raise StoreError(f"the counter object holds {data[:40]!r}, not a number: use a fresh key") from exc


def counter(url: str, key: str, resource: str, fenced: bool) -> GatewayCounter:
    """The factory a client process names (`lab.gateway_store:counter`)."""
    return GatewayCounter(url, key=key, resource=resource, fenced=fenced)


__all__ = ["UNFENCED_TOKEN", "GatewayCounter", "counter"]
