"""The probe: does the upstream do the conditional writes the fence relies on? Asked, not trusted.

Conditional writes are easy to get wrong: emulators that ignore the
headers, stores where concurrent `If-None-Match: *` PUTs all succeed,
proxies that drop `If-Match`. So before serving an s3:// upstream or a
conditional http(s) one (and as `fencegate upstream check`), the gateway
runs these checks on a scratch key of its own (`SCRATCH_PREFIX` and a
random name, removed at the end):

- `create`: `If-None-Match: *` on a new key is accepted;
- `strong-etag`: the write's answer gives a strong ETag (a weak `W/` one
  names no single version, so no write can be conditional on it);
- `metadata`: a HEAD gives back the token and resource the write carried;
- `if-none-match`: `If-None-Match: *` on the existing key is refused (412);
- `stale-if-match`: `If-Match` on an ETag the key no longer has is refused;
- `concurrent-if-match`: of 32 concurrent PUTs conditional on one ETag,
  exactly one succeeds and the key then holds its version (a PUT left
  unanswered in time counts as no success: SeaweedFS leaves a few so);
- `stale-conditional-delete`: a delete on a stale ETag is refused and the
  object stays.

A pass samples the store's behaviour; it cannot prove that its conditional
writes are atomic under every load (docs/safety.md). A check that meets an
error (502, 503, 504) fails with that error's code.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable
from dataclasses import asdict, dataclass

from gateway.errors import BadSetting, Refusal, UpstreamTimeout
from gateway.transport import RESOURCE, SCRATCH_PREFIX, TOKEN, Transport, VersionChanged

CONCURRENT = 32  # PUTs sent at once on one ETag
PROBE_TOKEN, PROBE_RESOURCE = 1, "fencegate-probe"


@dataclass(frozen=True, slots=True)
class Check:
    """One check of the probe: its name, whether it passed, and what was seen."""

    name: str
    passed: bool
    detail: str

    def as_json(self) -> dict[str, object]:
        return asdict(self)


class ProbeFailed(BadSetting):
    """The upstream failed a check: it cannot be trusted to keep the fence (one line, exit 2 at start)."""

    def __init__(self, where: str, check: Check) -> None:
        super().__init__(
            f"upstream {where} failed the conditional-write probe: {check.name}: {check.detail}; the gateway "
            "does not serve a store whose compare-and-swap it cannot rely on"
        )
        self.check = check


async def probe(transport: Transport) -> list[Check]:
    """Every check in order; the first one that fails ends the probe (the later ones depend on it)."""
    key = SCRATCH_PREFIX + secrets.token_hex(8)
    checks: list[Check] = []
    try:
        await _run(transport, key, checks)
    finally:
        await _clean(transport, key)
    return checks


async def check_upstream(transport: Transport) -> list[Check]:
    """`probe`, raising `ProbeFailed` on the first check that failed."""
    checks = await probe(transport)
    for check in checks:
        if not check.passed:
            raise ProbeFailed(transport.where, check)
    return checks


def _metadata(n: int) -> dict[str, str]:
    return {TOKEN: str(PROBE_TOKEN + n), RESOURCE: PROBE_RESOURCE}


async def _refused(write: Awaitable[object]) -> bool:
    try:
        await write
    except VersionChanged:
        return True
    return False


async def _run(transport: Transport, key: str, checks: list[Check]) -> None:
    def add(name: str, passed: bool, detail: str) -> bool:
        checks.append(Check(name, passed, detail))
        return passed

    async def put(n: int, match: str | None) -> str:
        body = f"probe {n} {secrets.token_hex(8)}".encode()  # distinct bytes: distinct ETags
        return await transport.put_if(
            key, body, content_type="text/plain", metadata=_metadata(n), match=match
        )

    try:
        first = await put(0, None)
        if not add("create", True, "If-None-Match: * on a new key was accepted"):
            return
        weak = first.startswith("W/")
        if not add(
            "strong-etag", not weak, f"the write's ETag is {'WEAK' if weak else 'strong'}: {first[:40]}"
        ):
            return
        found = await transport.head(key)
        token = None if found is None else found.token
        resource = None if found is None else found.resource
        if not add(
            "metadata", (token, resource) == (PROBE_TOKEN, PROBE_RESOURCE),
            f"a HEAD gave back token {token} and resource {resource!r} "
            f"(written: {PROBE_TOKEN}, {PROBE_RESOURCE!r})",
        ):  # fmt: skip
            return
        refused = await _refused(put(1, None))
        if not add("if-none-match", refused, "If-None-Match: * on an existing key was " + _said(refused)):
            return
        second = await put(2, first)
        refused = await _refused(put(3, first))
        if not add(
            "stale-if-match", refused, "If-Match on an ETag the key no longer has was " + _said(refused)
        ):
            return
        results = await asyncio.gather(
            *(put(10 + n, second) for n in range(CONCURRENT)), return_exceptions=True
        )
        won = [r for r in results if isinstance(r, str)]
        unknown = [r for r in results if isinstance(r, UpstreamTimeout)]
        errors = [r for r in results if not isinstance(r, str | VersionChanged | UpstreamTimeout)]
        if errors:
            raise errors[0]
        now = await transport.head(key)
        unanswered = f"; {len(unknown)} got no answer in time" if unknown else ""
        if not add(
            "concurrent-if-match", len(won) == 1 and now is not None and now.etag == won[0],
            f"{len(won)} of {CONCURRENT} concurrent PUTs conditional on one ETag succeeded (must be 1) and "
            f"the key {'holds' if now is not None and now.etag in won else 'does NOT hold'} the winner's "
            f"version{unanswered}",
        ):  # fmt: skip
            return
        refused = await _refused(transport.delete_if(key, match=second))
        kept = await transport.head(key)
        passed = refused and kept is not None and kept.etag == won[0]
        add(
            "stale-conditional-delete", passed,
            "a delete on a stale ETag was " + _said(refused) + ("" if kept else " and the object is gone"),
        )  # fmt: skip
    except Refusal as exc:
        add(_next_check(checks), False, f"the store's answer: {exc.code} ({exc.status})")
    except VersionChanged:
        add(_next_check(checks), False, "a write the store had no reason to refuse was refused (412)")


CHECKS = ("create", "strong-etag", "metadata", "if-none-match", "stale-if-match", "concurrent-if-match",
          "stale-conditional-delete")  # fmt: skip


def _next_check(checks: list[Check]) -> str:
    return CHECKS[len(checks)] if len(checks) < len(CHECKS) else CHECKS[-1]


def _said(refused: bool) -> str:
    return "refused (412)" if refused else "ACCEPTED: the store ignores the precondition"


async def _clean(transport: Transport, key: str) -> None:
    """Remove the scratch key, best effort: a leftover is one small object under SCRATCH_PREFIX."""
    try:
        found = await transport.head(key)
        if found is not None:
            await transport.delete_if(key, match=found.etag)
    except (Refusal, VersionChanged):
        pass
