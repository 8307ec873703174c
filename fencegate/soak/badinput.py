"""Bad input against a real gateway: schemathesis over /v1/openapi.json, and a raw fuzzer.

Both check two things on every request: a client error is never answered
5xx, and a refused request (4xx) changes nothing in storage. "Nothing" is
read straight from the gateway's SQLite file before and after each request:
every object (key, version, token, digest) and every mark. One documented
exception: a fenced GET or DELETE of a missing key answers 404 after its
fence passed, so it may raise the mark (docs/gateway.md, Decisions); it must
still leave every object alone.

The raw fuzzer writes bytes to a socket (hypothesis draws the method, path,
header names and values, and body), so it reaches what an HTTP client
library would refuse to send: control characters, odd header names, huge
values, broken tokens.
"""

from __future__ import annotations

import contextlib
import io
import socket
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core.result import Err

from fencegate.cli import main as fencegate
from fencegate.lab.cluster.gateway import GatewayProcess

RAW_TIMEOUT = 10.0  # seconds to wait for the gateway's answer to one raw request
Snapshot = tuple[frozenset[tuple[object, ...]], frozenset[tuple[object, ...]]]


@dataclass
class BadInputResult:
    tried: Counter[str] = field(default_factory=Counter)  # by source
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)


def snapshot(db: Path) -> Snapshot:
    """Every object and every mark in the gateway's SQLite file."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        objects = frozenset(conn.execute("SELECT key, version, token, digest FROM fencegate_objects"))
        marks = frozenset(conn.execute("SELECT resource, token FROM fencegate_fences"))
    conn.close()
    return objects, marks


def judge(
    result: BadInputResult,
    source: str,
    what: str,
    status: int,
    fenced: bool,
    before: Snapshot,
    after: Snapshot,
) -> None:
    result.tried[source] += 1
    result.statuses[status] += 1
    if status >= 500:
        result.server_errors.append(f"{source}: {what} -> {status}")
    if 400 <= status < 500:
        objects_same = before[0] == after[0]
        marks_same = before[1] == after[1] or (status == 404 and fenced)
        if not (objects_same and marks_same):
            result.changed.append(f"{source}: {what} -> {status} changed storage")


def run_schemathesis(url: str, db: Path, secret: str, *, examples: int, result: BadInputResult) -> None:
    """Every operation of the OpenAPI document, `examples` generated cases each."""
    schema = schemathesis.openapi.from_url(f"{url}/v1/openapi.json")
    auth = {"Authorization": f"Bearer {secret}"}
    for found in schema.get_all_operations():
        if isinstance(found, Err):
            raise found.err()
        operation = found.ok()

        @settings(
            max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(case=operation.as_strategy())
        def one(case: schemathesis.Case[Any]) -> None:
            before = snapshot(db)
            headers = {**auth, **dict(case.headers or {})}
            response = case.call(base_url=url, headers=headers)
            fenced = "Fencing-Token" in headers or "fencing-token" in headers
            what = f"{case.method} {case.formatted_path}"
            judge(result, "schemathesis", what, response.status_code, fenced, before, snapshot(db))

        one()


_HEADER_NAMES = st.sampled_from(
    ["Fencing-Token", "Fencing-Resource", "Authorization", "Idempotency-Key", "Content-Type", "X-Other"]
) | st.text(
    st.characters(min_codepoint=33, max_codepoint=126, exclude_characters=":"), min_size=1, max_size=30
)
_HEADER_VALUES = (
    st.sampled_from(
        ["0", "-1", "007", "1e3", " 5", "9223372036854775808", str(2**62), "18446744073709551616"]
    )
    | st.integers(min_value=-(2**70), max_value=2**70).map(str)
    | st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60)
    | st.binary(max_size=40).map(lambda b: b.decode("latin-1"))
    | st.just("x" * 9000)
)
_PATHS = st.sampled_from(
    ["/v1/objects/", "/v1/objects", "/v1/fences/", "/healthz", "/v1/objects/fz/"]
).flatmap(
    lambda base: st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=40).map(
        lambda tail: base + tail
    )
)
_FORBIDDEN = {"content-length", "transfer-encoding", "host", "connection", "expect", "upgrade"}


def raw_request(
    host: str, port: int, method: str, path: str, headers: list[tuple[str, str]], body: bytes
) -> int:
    """Send one request as raw bytes; the answer's status (aiohttp's parser answers 400 to broken HTTP)."""
    lines = [f"{method} {path} HTTP/1.1".encode("latin-1"), b"Host: fuzz", b"Connection: close"]
    lines += [f"{name}: {value}".encode("latin-1") for name, value in headers]
    lines.append(f"Content-Length: {len(body)}".encode())
    with socket.create_connection((host, port), timeout=RAW_TIMEOUT) as sock:
        sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    parts = answer.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 599


def run_raw_fuzzer(
    host: str, port: int, db: Path, secret: str, *, examples: int, result: BadInputResult
) -> None:
    """`examples` raw requests with drawn methods, paths, headers and bodies."""

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        method=st.sampled_from(["PUT", "GET", "DELETE", "POST", "PATCH", "HEAD", "OPTIONS", "BREW"]),
        path=_PATHS,
        headers=st.lists(st.tuples(_HEADER_NAMES, _HEADER_VALUES), max_size=6),
        authorized=st.booleans(),
        body=st.binary(max_size=256),
    )
    def one(method: str, path: str, headers: list[tuple[str, str]], authorized: bool, body: bytes) -> None:
        sent = [(n, v.replace("\r", "").replace("\n", "")) for n, v in headers if n.lower() not in _FORBIDDEN]
        if authorized:
            sent.append(("Authorization", f"Bearer {secret}"))
        before = snapshot(db)
        status = raw_request(host, port, method, path, sent, body)
        fenced = any(n.lower() == "fencing-token" for n, _ in sent)
        judge(result, "raw fuzzer", f"{method} {path[:60]}", status, fenced, before, snapshot(db))

    one()


def bad_input_phase(state_dir: Path, *, schemathesis_examples: int, raw_examples: int) -> BadInputResult:
    """Start a gateway of its own (SQLite, API keys), throw both fuzzers at it, stop it."""
    keys = state_dir / "badinput-keys.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert fencegate(["keys", "--file", str(keys), "add", "fuzz", "--prefix", ""]) == 0
    secret = printed.getvalue().strip()
    data = state_dir / "badinput-data"
    gateway = GatewayProcess(state_dir / "badinput.log", "--data-dir", str(data), "--api-keys", str(keys))
    url = gateway.start()
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    result = BadInputResult()
    try:
        db = data / "fencegate.db"
        run_schemathesis(url, db, secret, examples=schemathesis_examples, result=result)
        run_raw_fuzzer(parts.hostname, parts.port, db, secret, examples=raw_examples, result=result)
    finally:
        gateway.stop()
    return result
