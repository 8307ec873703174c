"""schemathesis hooks for tests/gateway/test_contract.py: unique Idempotency-Keys, no `%` in path
names, no targeted search.

An Idempotency-Key names one request: the same key on another request is
422 `idempotency_key_reused`, and the same key on the same request is a
retry, answered with the first outcome (a replayed DELETE says 200 and
deletes nothing new). Generated data reuses short keys ("0") across unrelated
requests, which a correct client never does; so a well-formed key gets a
unique suffix before the request is sent. Malformed keys are left alone: they
must still be refused.

A key or resource in a URL path is documented without `%` (gateway/parsing.py
says why), while the server still accepts one sent as `%25`: the one place
where the document is stricter than the server, on purpose. A generated
request whose only fault is such a `%` would be accepted and reported as a
schema-violating request accepted, so each `%` of a path name (`%25` on the
wire) is sent as `!` instead, a character the server refuses: the request
stays one the server must refuse, for the fault schemathesis meant.

Targeted search is off: schemathesis reports each response's success to
`hypothesis.target`, and hypothesis' hill climbing over those scores can
crash on its own (`IndexError` in `optimiser.py`, seen in CI with hypothesis
6.170.17), which fails the run without any finding about the gateway. Without
targets, generation is plain random search over the same strategies; every
check still runs on every response.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import hypothesis
import schemathesis

from lockclient.wire import IDEMPOTENCY_KEY_PATTERN
from storage.models import MAX_IDEMPOTENCY_KEY_LENGTH

_VALID = re.compile(IDEMPOTENCY_KEY_PATTERN)


def _no_target(observation: float, *, label: str = "") -> float:
    return observation


hypothesis.target = _no_target


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    for name, value in (case.path_parameters or {}).items():
        if isinstance(value, str) and "%25" in value:
            case.path_parameters[name] = value.replace("%25", "%21")
    headers = case.headers or {}
    key = headers.get("Idempotency-Key")
    if isinstance(key, str) and _VALID.fullmatch(key):
        suffix = f"-{uuid.uuid4().hex}"
        headers["Idempotency-Key"] = key[: MAX_IDEMPOTENCY_KEY_LENGTH - len(suffix)] + suffix
