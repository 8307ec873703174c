"""Admission: who a request comes from, and holding its slots while it runs.

A client is its API key's name when keys are configured and the request
presents a valid one (or, with mutual TLS and no bearer key, its client
certificate names one), otherwise its certificate's name (`cert:<CN>`) or
its peer address. The identity is computed
once per request by `client_middleware` (the views authorize with the
`Credentials` it found),
names the client in the audit trail and in idempotency records, and is what
the per-client cap (`admission.ClientLimiter`) counts. Probes (`/healthz`,
`/readyz`, `/metrics`) are not counted: a load balancer behind one address
must always be able to ask. Every other request also counts toward
`admission.Drain`, which graceful shutdown waits on.

A certificate's name becomes `cert:<CN>` only if the client column of the
audit trail and idempotency records can hold it: at most MAX_CLIENT_LENGTH
characters, printable. X.509 bounds a CN at 64, but a CA can sign longer
ones, and OpenSSL verifies them (a NUL too): such a name made every write of
its client 503 on PostgreSQL (`value too long`; NUL is no character of a
PostgreSQL text), while SQLite took it. That client is refused 401 before
anything runs, with the fix; probes still answer it.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.app_keys import AppKeys, RequestKeys
from gateway.auth import OPEN, Credentials
from gateway.errors import MalformedRequest, NotAuthenticated
from gateway.parsing import one_value
from gateway.tls import peer_name
from storage.models import MAX_CLIENT_LENGTH

PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
CERT = "cert:"  # the identity of a client named by its certificate alone
MAX_CN_LENGTH = MAX_CLIENT_LENGTH - len(CERT)


def _identify(request: web.Request) -> tuple[str, Credentials]:
    """The client's name, and its credentials: the key they name, or why they name none. The view
    raises that refusal only where its route needs a key, after the request's own 400s."""
    api_keys = request.app[AppKeys.api_keys]
    subject = peer_name(request) if request.app[AppKeys.settings].mutual_tls else None
    if api_keys is None:
        return _unnamed(request, subject), OPEN
    try:
        header = one_value(request.headers, "Authorization")  # a proxy must not check another one
        if header is None and subject is not None:
            key = api_keys.named(subject)
            if key is None:
                raise NotAuthenticated(
                    f"the client certificate's subject CN {subject!r} names no API key; add one with "
                    "`fencegate keys add NAME` named after it, or send `Authorization: Bearer <key>`"
                )
        else:
            key = api_keys.identify(header)
    except (NotAuthenticated, MalformedRequest) as exc:
        return _unnamed(request, subject), Credentials(refusal=exc)
    return f"key:{key.name}", Credentials(key=key)


def _unnamed(request: web.Request, subject: str | None) -> str:
    """A client no key names: its certificate's name, else its peer address."""
    if subject is None:
        return f"ip:{request.remote or 'unknown'}"
    if request.path not in PROBES:  # a probe is answered whoever asks, and names no client anywhere
        _check_subject(subject)
    return f"{CERT}{subject}"


def _check_subject(subject: str) -> None:
    """401 unless `cert:<subject>` fits the client column of the audit trail and idempotency records."""
    if subject.strip() and subject.isprintable() and len(subject) <= MAX_CN_LENGTH:
        return
    raise NotAuthenticated(
        f"the client certificate's subject CN {subject[:40]!r} ({len(subject)} characters) cannot name a "
        f"client in the audit trail; ask the CA for a certificate whose CN is 1..{MAX_CN_LENGTH} "
        "printable characters (X.509 allows 64), or, where the gateway has API keys, send "
        "`Authorization: Bearer <key>`"
    )


@web.middleware
async def client_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Name the client (`RequestKeys.client`, `RequestKeys.credentials`) and hold one of its slots."""
    client, request[RequestKeys.credentials] = _identify(request)
    request[RequestKeys.client] = client
    if request.path in PROBES:
        return await handler(request)
    # Plain calls rather than context managers: this runs on every request.
    drain, limiter = request.app[AppKeys.drain], request.app[AppKeys.limiter]
    drain.admit()
    try:
        limiter.acquire(client)
        try:
            return await handler(request)
        finally:
            limiter.release(client)
    finally:
        drain.done()
