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

TLS (members whose client URLs are `https://`): the ZooKeeper source's
settings, as keywords or in the URL (`etcd://etcd1:2379,etcd2:2379?use_ssl=true
&ca=ca.pem&certfile=client.crt&keyfile=client.key`). Each member's certificate
is always verified: signed by `ca` (gRPC's bundled roots without it) and valid
for the host name or address connected to; there is no setting to skip that.
`certfile` and `keyfile` are shown to members that require a client
certificate (`--client-cert-auth`). The files are read and checked when the
source is made (a `ConfigurationError` names the bad one), so a renewed
certificate is used by a source made after it. A failed handshake is a
`TokenSourceError` naming the member and the reason, at once when every
member's certificate was refused, never a plaintext retry. aetcd 1.0 opens
only plaintext channels, so `_SecureClient` opens gRPC's TLS one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

from lockclient.errors import ConfigurationError, TLSError, TokenSourceError
from lockclient.tls import client_context, explain_hang_up
from lockclient.tokens._base import (
    ClosingSource,
    check_resource,
    check_seconds,
    map_errors,
    missing_extra,
    query_options,
)
from lockclient.tokens._batch import Batcher

try:
    import aetcd
    import grpc
    from aetcd import rpc
    from aetcd.exceptions import ClientError, InvalidArgumentError, UnauthenticatedError
except ImportError as exc:
    raise missing_extra("etcd", "etcd", exc) from exc

__all__ = [
    "DEFAULT_PREFIX",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "EtcdTokens",
    "parse_endpoints",
    "url_options",
]

T = TypeVar("T")

DEFAULT_PREFIX = "/fencegate/tokens/"
DEFAULT_TIMEOUT = 5.0  # seconds for one token, trying every member; then TokenSourceError
DEFAULT_REQUEST_TIMEOUT = 2.0  # seconds one member gets to answer before the next one is asked
RETRY_DELAY = 0.05  # seconds between rounds over the members (an election takes about one election timeout)
IN_FLIGHT = 8  # transactions out at once; the rest of the draws wait to share the next ones
RECONNECT_MS = 1000  # the longest wait between attempts to connect to a member (gRPC's: 120 s)
MAX_BATCH = 64  # resources in one transaction at most (etcd's default --max-txn-ops is 128)
FIX = (
    "check that a majority of the etcd members is running and reachable at the given endpoints "
    "(members with https client URLs need use_ssl=true)"
)
TLS_FIX = "check ca, certfile and keyfile against the members' https client URLs"
# URL query parameters: the ZooKeeper source's names for the same settings; no switch turns verification off
FLAGS = ("use_ssl",)
FILES = ("ca", "certfile", "keyfile")
PEER = "member"
UNTRUSTED = (
    f"the {PEER}'s certificate is not signed by the CA this client trusts: ca must hold the CA that signed it"
)
# gRPC reports a failed handshake only in words, inside an UNAVAILABLE status: (words, reason, final);
# final means retrying cannot help (a certificate was refused), so the draw fails at once
TLS_FAILURES = (
    (
        "Hostname Verification Check failed",
        f"the {PEER}'s certificate is not valid for the name connected to: connect by a host name or "
        "address the certificate lists",
        True,
    ),
    (
        "certificate has expired",
        f"the {PEER}'s certificate has expired: renew it, or check this machine's clock",
        True,
    ),
    ("CERTIFICATE_VERIFY_FAILED", UNTRUSTED, True),
    ("BAD_SIGNATURE", UNTRUSTED, True),  # a CA of the same name did not sign it
    # TLS 1.3: the member hung up right after the handshake, over the client certificate (reason: below)
    ("TSI_DATA_CORRUPTED", "", True),
    (
        "Handshake read failed",
        f"the {PEER} closed the connection during the TLS handshake: does it serve TLS (https) on this port?",
        False,
    ),
    ("andshake failed", "the TLS handshake failed", True),
)
# errors that are about the request, not the member: asking another member would not help
FINAL = (InvalidArgumentError, UnauthenticatedError)


def url_options(query: str) -> dict[str, Any]:
    """The TLS keywords of `EtcdTokens` from an `etcd://` URL's query."""
    note = " (the members' certificates are always verified)"
    return query_options(query, scheme="etcd", flags=FLAGS, files=FILES, note=note)


def _read(setting: str, path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise ConfigurationError(f"TLS: cannot use {setting} {path!r}: {exc.strerror or exc}") from exc


def _credentials(ca: str | None, certfile: str | None, keyfile: str | None) -> grpc.ChannelCredentials:
    """gRPC's TLS credentials from the files, checked first: unreadable, not PEM, a key that does not fit
    its certificate, or an encrypted key (gRPC takes no password) is a `ConfigurationError` saying which."""
    if (certfile is None) != (keyfile is None):
        raise ConfigurationError("certfile and keyfile go together: give the certificate and its key")
    key = _read("keyfile", keyfile) if keyfile is not None else None
    if key is not None and b"ENCRYPTED" in key:
        raise ConfigurationError(
            f"TLS: keyfile {keyfile!r} is encrypted and gRPC takes no password: give an unencrypted key "
            "(e.g. openssl pkey -in KEY -out PLAIN.key), readable by this user only"
        )
    client_context(ca=ca, cert=certfile, key=keyfile)  # the same checks and messages as the other sources
    return grpc.ssl_channel_credentials(
        root_certificates=_read("ca", ca) if ca is not None else None,
        private_key=key,
        certificate_chain=_read("certfile", certfile) if certfile is not None else None,
    )


def tls_failure(detail: str, *, gave_certificate: bool) -> tuple[str, bool] | None:
    """Why gRPC's handshake with a member failed (from its words), and whether that is final; None if
    `detail` is not about TLS."""
    for words, reason, final in TLS_FAILURES:
        if words in detail:
            if not reason:
                reason = explain_hang_up(
                    gave_certificate=gave_certificate, peer=PEER, client="certfile and keyfile"
                )
            return reason, final
    return None


class _SecureClient(aetcd.Client):  # type: ignore[misc] # aetcd is untyped
    """aetcd's client over gRPC's TLS channel (aetcd 1.0's `connect` opens only plaintext ones).

    It sets up only the KV stub, the one this source calls; there is no
    await between the check and the set, so concurrent first calls open one
    channel.
    """

    def __init__(self, *, host: str, port: int, timeout: float, credentials: grpc.ChannelCredentials) -> None:
        super().__init__(host=host, port=port, timeout=timeout, options=channel_options(timeout))
        self._credentials = credentials

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        target = f"{self._host}:{self._port}"
        self.channel = grpc.aio.secure_channel(target, self._credentials, options=list(self._options.items()))
        self.kvstub = rpc.KVStub(self.channel)
        self._connected.set()


def channel_options(request_timeout: float) -> dict[str, int]:
    """gRPC's waits around connecting to a member, which no call's deadline shortens. An attempt
    waits for the member's handshake 20 s by default (a member that accepts and does not answer,
    as one starting up may, held its channel that long); it now waits `request_timeout`. Between
    attempts gRPC waits 1.6 times longer each time, up to 120 s, and fails calls meanwhile (a
    member back after a long outage went unused that long); the wait is capped at 1 s."""
    return {
        "grpc.min_reconnect_backoff_ms": max(1, round(request_timeout * 1000)),
        "grpc.max_reconnect_backoff_ms": RECONNECT_MS,
    }


def parse_endpoints(hosts: str) -> list[tuple[str, int]]:
    """'h1:p1,h2:p2' as [(h1, p1), (h2, p2)]; a clear error for anything else."""
    if "@" in hosts:  # never shown: it may hold a password
        raise ConfigurationError(
            "etcd endpoints take no user or password: drop 'user:password@', give 'host:port[,host:port...]'"
        )
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
        use_ssl: bool = False,
        ca: str | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
    ) -> None:
        """`use_ssl`, `ca`, `certfile`, `keyfile`: TLS to the members; see the module docstring."""
        self.endpoints = parse_endpoints(hosts)
        if not prefix:
            raise ConfigurationError("prefix must not be empty: use e.g. /fencegate/tokens/")
        check_seconds(timeout=timeout, request_timeout=request_timeout)
        self.prefix = prefix
        self.timeout = timeout
        self.request_timeout = request_timeout
        self.use_ssl = use_ssl
        self._gives_certificate = certfile is not None
        if use_ssl:
            credentials = _credentials(ca, certfile, keyfile)
            self._clients = [
                _SecureClient(host=host, port=port, timeout=request_timeout, credentials=credentials)
                for host, port in self.endpoints
            ]
        else:
            given = [n for n, v in zip(FILES, (ca, certfile, keyfile), strict=True) if v]
            if given:
                raise ConfigurationError(
                    f"{', '.join(given)} given but use_ssl is off: add use_ssl=true, or drop them"
                )
            options = channel_options(request_timeout)
            self._clients = [
                aetcd.Client(host=host, port=port, timeout=request_timeout, options=options)
                for host, port in self.endpoints
            ]
        self._current = 0  # the member that answered last
        # what the members last answered, for the error of a draw past its timeout
        self._failure: ClientError | None = None
        self._refused: TLSError | None = None  # the last failed handshake, since the last answer
        self._batch = Batcher(self._issue, max_batch=MAX_BATCH, in_flight=IN_FLIGHT, distinct=True)

    def _key(self, resource: str) -> bytes:
        return (self.prefix + resource).encode()

    async def _request(self, doing: str, call: Callable[[Any], Awaitable[T]]) -> T:
        """`call(client)` on the member that answered last, then on the others, until `timeout`."""
        with map_errors("etcd", doing, ClientError, OSError, fix=FIX):
            try:
                async with asyncio.timeout(self.timeout):
                    while True:
                        final = 0  # members whose certificate, or ours, was refused in this round
                        for _ in self._clients:
                            index = self._current
                            try:
                                answer = await call(self._clients[index])
                            except FINAL:
                                raise
                            except ClientError as exc:  # down, no leader, no answer in time: the next one
                                self._failure = exc
                                handshake = self._handshake_failure(index, exc)
                                if handshake is not None:
                                    self._refused, is_final = handshake
                                    final += is_final
                                if self._current == index:
                                    self._current = (index + 1) % len(self._clients)
                            else:
                                self._failure = self._refused = None
                                return answer
                        if self._refused is not None and final == len(self._clients):
                            raise self._tls_error(doing, self._refused) from self._refused
                        await asyncio.sleep(RETRY_DELAY)
            except TimeoutError as exc:
                self._give_up(doing, exc)

    def _give_up(self, doing: str, exc: TimeoutError) -> NoReturn:
        """The error of a request or a draw past its `timeout`: the last failed handshake, or what the
        members last answered."""
        refused, failure = self._refused, self._failure
        if refused is not None:
            raise self._tls_error(doing, refused) from refused
        last = f"{type(failure).__name__}: {failure}" if failure else "no member answered"
        raise TokenSourceError(
            f"etcd token source could not {doing} within {self.timeout:g} s "
            f"(no quorum, or no member reachable; last: {last}); {FIX}",
            source="etcd",
        ) from exc

    def _handshake_failure(self, index: int, exc: ClientError) -> tuple[TLSError, bool] | None:
        """The member's failed TLS handshake as a `TLSError` (and whether it is final), or None."""
        if not self.use_ssl:
            return None
        found = tls_failure(str(exc), gave_certificate=self._gives_certificate)
        if found is None:
            return None
        reason, final = found
        host, port = self.endpoints[index]
        member = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return TLSError(f"{member}: {reason} (gRPC: {exc})", server=member), final

    def _tls_error(self, doing: str, refused: TLSError) -> TokenSourceError:
        return TokenSourceError(
            f"etcd token source could not {doing}: no TLS connection to {refused}; {TLS_FIX}", source="etcd"
        )

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
        # `timeout` bounds the whole draw, queued behind transactions that do not come back included
        try:
            async with asyncio.timeout(self.timeout):
                return await self._batch.draw(check_resource(resource))
        except TimeoutError as exc:
            self._give_up("issue a token", exc)

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
        tls = ", use_ssl=True" if self.use_ssl else ""
        return f"EtcdTokens({','.join(f'{h}:{p}' for h, p in self.endpoints)!r}{tls})"
