"""What the masters' answers to a release prove: released, or lost before it (`LockLost`).

`LockLost` needs evidence: enough masters answered "not yours" that no
quorum can have held the value. A master that did not answer is given the
benefit of the doubt (its key expires by the TTL), so the answers of a
quorum, or silence, are a release without error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lockclient.errors import LockLost
from lockclient.lease import Lease
from lockclient.observe import Events
from lockclient.transport.fanout import Outcome

__all__ = ["judge_release"]


def judge_release(
    lease: Lease[Any], outcomes: Sequence[Outcome[bool]], *, masters: int, quorum: int, events: Events
) -> None:
    """Mark `lease` released (or lost, raising `LockLost`) by the compare-and-delete's `outcomes` from
    the `masters` there are."""
    not_ours = sum(o is False for o in outcomes)
    if len(outcomes) - not_ours >= quorum:
        # a quorum released it, or masters that did not answer may still have held it: no evidence
        lease._mark_lost("released", notify=False)
        events.released(lease)
        return
    why = f"{not_ours} of {masters} masters no longer held it at release, so a quorum ({quorum}) cannot have"
    if lease._mark_lost(why):
        events.lost(lease, f"found at release: {why}")
    raise LockLost(
        f"the lease on {lease.resource!r} (token {lease.token}) was lost before release: {why}; "
        "its writes must be checked by the fence",
        resource=lease.resource,
        token=lease.token,
    )
