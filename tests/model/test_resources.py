"""Two resource names for one key: fenced per named resource it loses updates; bound to one, it holds.

Each request of these variants names either the lock (`Fencing-Resource`
with the lease) or the key (no header), chosen anew per request, and a client
that read the counter as 0 may recreate it by DELETE then PUT. The trails are
read through the resource each accepted request named, which the trail
carries in its detail.
"""

from __future__ import annotations

import re
from typing import Any

from fencegate.model.report import variant_verdict
from fencegate.model.runner import CheckResult
from fencegate.model.trail import RESOURCES
from fencegate.model.variants import PROPERTIES, applicable
from tests.model.conftest import counterexample

_NAMED = re.compile(r"^(?:names )?resource (\w+)")


def _resource(event: dict[str, Any]) -> str:
    match = _NAMED.match(event["detail"])
    assert match is not None, event
    assert match.group(1) in RESOURCES.values()
    return match.group(1)


def _stale_write(result: CheckResult) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first stale write accepted (a lower token than a request accepted before it), and that request.

    The trail must be a lost update, which the stale write caused.
    """
    trail = counterexample(result)
    assert trail.final < trail.acknowledged
    accepted = trail.accepted()
    for index, event in enumerate(accepted):
        newer = [e for e in accepted[:index] if e["token"] > event["token"]]
        if newer and event["kind"] == "write":
            return newer[-1], event
    raise AssertionError(f"no stale write accepted after a newer request: {accepted}")


def test_only_the_key_bound_to_one_resource_keeps_every_promise(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    variants = ["any-resource", "bound-resource", "bound-on-create", "bound-until-delete"]
    verdicts = {
        v: variant_verdict([by_key[(v, p)] for p in applicable(v, list(PROPERTIES))]) for v in variants
    }
    assert verdicts == {
        "any-resource": "unsafe",
        "bound-resource": "safe",
        "bound-on-create": "unsafe",
        "bound-until-delete": "unsafe",
    }


def test_fenced_per_named_resource_a_stale_write_naming_another_resource_loses_an_update(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    result = by_key[("any-resource", "lost-update")]
    newer, stale = _stale_write(result)
    # it passed the mark of a resource the newer lease never raised
    assert _resource(stale) != _resource(newer)
    assert result.trail is not None
    assert not any("belongs to" in e["detail"] for e in result.trail.events)  # nothing refuses a resource


def test_a_fenced_read_of_the_absent_key_must_bind_it(by_key: dict[tuple[str, str], CheckResult]) -> None:
    newer, stale = _stale_write(by_key[("bound-on-create", "lost-update")])
    # the newer lease read the key as absent under one name; the stale write created it under another
    assert (newer["kind"], newer["value"]) == ("read", 0)
    assert stale["kind"] == "write"
    assert "binds the key to resource" in stale["detail"]
    assert _resource(stale) != _resource(newer)


def test_a_delete_that_frees_the_key_lets_a_stale_writer_recreate_it_under_another_resource(
    by_key: dict[tuple[str, str], CheckResult],
) -> None:
    newer, stale = _stale_write(by_key[("bound-until-delete", "lost-update")])
    assert newer["kind"] == "delete"
    assert "free again" in newer["detail"]
    assert stale["kind"] == "write"
    assert "binds the key to resource" in stale["detail"]
    assert _resource(stale) != _resource(newer)
