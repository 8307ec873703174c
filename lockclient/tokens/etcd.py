"""Fencing tokens from etcd: the revision of a transaction that writes the resource's key.

etcd keeps one revision counter for the whole cluster; every write raises it,
in the order Raft commits them. A transaction that puts
`/fencegate/tokens/<resource>` answers with the revision it made, which is
the key's new mod revision: a later write gets a larger one, across leader
changes and member restarts (the counter is in every member's log), so
tokens strictly increase, and the key's current mod revision bounds every
token issued for it. A cluster wiped of its data starts again low, which the
gateway reports as `token_source_regressed` only while its tokens are below
the marks (docs/operations.md: move it past the highest mark first).

No quorum, no token. A write needs a majority of members; while there is
none, every member refuses or times out, and the draw raises
`TokenSourceError` once `timeout` has passed. A token is only ever a revision
etcd answered with, never a guess.

One aetcd client per member: a request goes to the member that answered
last, and moves on to the next one when a member is down, has no leader, or
does not answer within `request_timeout`, until `timeout`.

Draws waiting at the same moment share one transaction (`Batcher`), one put
per resource. Every put of a transaction gets the same revision, so a
transaction never holds two draws for one resource: the later one goes in
the next. Up to IN_FLIGHT transactions are out at once (gRPC multiplexes them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from lockclient.errors import ConfigurationError, TokenSourceError
from lockclient.tokens._base import ClosingSource, check_resource, check_seconds, map_errors, missing_extra
from lockclient.tokens._batch import Batcher

try:
    import aetcd
    from aetcd.exceptions import ClientError, InvalidArgumentError, UnauthenticatedError
except ImportError as exc:
    raise missing_extra("etcd", "etcd", exc) from exc

__all__ = ["DEFAULT_PREFIX", "DEFAULT_REQUEST_TIMEOUT", "DEFAULT_TIMEOUT", "EtcdTokens", "parse_endpoints"]

T = TypeVar("T")

DEFAULT_PREFIX = "/fencegate/tokens/"
DEFAULT_TIMEOUT = 5.0  # seconds for one token, trying every member; then TokenSourceError
DEFAULT_REQUEST_TIMEOUT = 2.0  # seconds one member gets to answer before the next one is asked
RETRY_DELAY = 0.05  # seconds between rounds over the members (an election takes about one election timeout)
IN_FLIGHT = 8  # transactions out at once; the rest of the draws wait to share the next ones
MAX_BATCH = 64  # resources in one transaction at most (etcd's default --max-txn-ops is 128)
FIX = "check that a majority of the etcd members is running and reachable at the given endpoints"
# errors that are about the request, not the member: asking another member would not help
FINAL = (InvalidArgumentError, UnauthenticatedError)


def parse_endpoints(hosts: str) -> list[tuple[str, int]]:
    """'h1:p1,h2:p2' as [(h1, p1), (h2, p2)]; a clear error for anything else."""
    endpoints = []
    for part in hosts.split(","):
        host, colon, port = part.strip().rpartition(":")
        if not (host and colon and port.isdigit() and 0 < int(port) < 65536) or "/" in part:
            raise ConfigurationError(
                f"etcd endpoints must be 'host:port[,host:port...]', got {hosts!r}: "
                "e.g. etcd://127.0.0.1:2379,127.0.0.1:22379"
            )
        endpoints.append((host.strip("[]"), int(port)))
    return endpoints


class EtcdTokens(ClosingSource):
    """Tokens that are etcd revisions; connects on first use, fails over between members."""

    def __init__(
        self,
        hosts: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = DEFAULT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self.endpoints = parse_endpoints(hosts)
        if not prefix:
            raise ConfigurationError("prefix must not be empty: use e.g. /fencegate/tokens/")
        check_seconds(timeout=timeout, request_timeout=request_timeout)
        self.prefix = prefix
        self.timeout = timeout
        self.request_timeout = request_timeout
        self._clients = [
            aetcd.Client(host=host, port=port, timeout=request_timeout) for host, port in self.endpoints
        ]
        self._current = 0  # the member that answered last
        self._batch = Batcher(self._issue, max_batch=MAX_BATCH, in_flight=IN_FLIGHT, distinct=True)

    def _key(self, resource: str) -> bytes:
        return (self.prefix + resource).encode()

    async def _request(self, doing: str, call: Callable[[Any], Awaitable[T]]) -> T:
        """`call(client)` on the member that answered last, then on the others, until `timeout`."""
        failure: ClientError | None = None
        with map_errors("etcd", doing, ClientError, OSError, fix=FIX):
            try:
                async with asyncio.timeout(self.timeout):
                    while True:
                        for _ in self._clients:
                            index = self._current
                            try:
                                return await call(self._clients[index])
                            except FINAL:
                                raise
                            except ClientError as exc:  # down, no leader, no answer in time: the next one
                                failure = exc
                                if self._current == index:
                                    self._current = (index + 1) % len(self._clients)
                        await asyncio.sleep(RETRY_DELAY)
            except TimeoutError as exc:
                last = f"{type(failure).__name__}: {failure}" if failure else "no member answered"
                raise TokenSourceError(
                    f"etcd token source could not {doing} within {self.timeout:g} s "
                    f"(no quorum, or no member reachable; last: {last}); {FIX}",
                    source="etcd",
                ) from exc

    async def _issue(self, resources: Sequence[str]) -> list[int]:
        async def put_all(client: Any) -> list[int]:
            puts = [client.transactions.put(self._key(r), b"") for r in resources]
            _, responses = await client.transaction(compare=[], success=puts, failure=[])
            revisions = [int(r.response_put.header.revision) for r in responses]
            if len(revisions) != len(resources) or min(revisions) < 1:
                raise ClientError(f"a transaction of {len(resources)} puts answered {revisions}")
            return revisions

        return await self._request("issue a token", put_all)

    async def next_token(self, resource: str) -> int:
        return await self._batch.draw(check_resource(resource))

    async def upper_bound(self, resource: str) -> int:
        """The key's mod revision (0 before its first token), read linearizably: >= every token issued."""
        key = self._key(check_resource(resource))

        async def read(client: Any) -> int:
            found = await client.get(key)
            return 0 if found is None else int(found.mod_revision)

        return await self._request("read the highest token", read)

    async def aclose(self) -> None:
        await self._batch.aclose()
        for client in self._clients:
            await client.close()

    def __repr__(self) -> str:
        return f"EtcdTokens({','.join(f'{h}:{p}' for h, p in self.endpoints)!r})"
