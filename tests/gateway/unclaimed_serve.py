"""`fencegate serve` whose s3 proxy ignores `Idempotency-Key`: the idempotency tests' control only.

`python -m tests.gateway.unclaimed_serve serve ARGS` is `fencegate serve ARGS`
with every write sent to the store as if it came without its key: no record
is claimed, so nothing serializes identical retries. The test that counts one
application per key must count more through this.
"""

from __future__ import annotations

import dataclasses
import sys

from fencegate.cli import main
from gateway.conditional import ConditionalStore
from storage.protocols import FencedRequest, ObjectData, ObjectMeta

_fenced = ConditionalStore.fenced


async def _unclaimed(self: ConditionalStore, request: FencedRequest) -> ObjectMeta | ObjectData:
    caller = dataclasses.replace(request.caller, idempotency_key=None)
    return await _fenced(self, dataclasses.replace(request, caller=caller))


if __name__ == "__main__":
    ConditionalStore.fenced = _unclaimed  # type: ignore[method-assign]
    sys.exit(main(sys.argv[1:]))
