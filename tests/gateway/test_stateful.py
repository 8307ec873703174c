"""A hypothesis state machine: random PUT/GET/DELETE with random tokens from several clients
against a real `fencegate serve`, checked step by step against a model of the fence.

The model is the whole contract: a key belongs to the resource of its first
request that passed the fence (a write, or a fenced read or delete even of a
missing key), for good (a delete keeps the binding); a change or fenced
read naming another resource is refused 409 `resource_mismatch` and changes
nothing, no mark included; per resource a mark that only rises; a request
with a token below it is refused 409 `stale_token` and changes nothing;
otherwise the mark becomes the token and the change applies. Writers name
the shared lock's resource or none (the key), so the two client styles meet
on every key.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from fencegate.lab.cluster.gateway import GatewayProcess

KEYS = ("a", "b", "c")
SHARED = "lock"  # one lease covering every key, beside per-key resources


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("stateful")
    proc = GatewayProcess(Path(tmp / "gw.log"), "--data-dir", str(tmp / "data"))
    try:
        yield proc.start()
    finally:
        proc.stop()


@dataclass
class Stored:
    data: bytes
    token: int
    version: int


def call(
    method: str, url: str, *, data: bytes | None = None, headers: dict[str, str]
) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310 - http only
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 - loopback test server
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read(), dict(err.headers)


class FenceMachine(RuleBasedStateMachine):
    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.ns = f"sm{uuid.uuid4().hex[:10]}"
        self.marks: dict[str, int] = {}
        self.objects: dict[str, Stored] = {}
        self.bound: dict[str, str] = {}  # key -> the resource it belongs to

    def _name(self, name: str) -> str:
        return f"{self.ns}/{name}"

    def _request(
        self, method: str, key: str, resource: str | None, token: int | None, data: bytes | None = None
    ) -> tuple[int, bytes, dict[str, str]]:
        headers = {}
        if token is not None:
            headers["Fencing-Token"] = str(token)
        if resource is not None:
            headers["Fencing-Resource"] = self._name(resource)
        return call(method, f"{self.url}/v1/objects/{self._name(key)}", data=data, headers=headers)

    def _admit(self, resource: str, token: int) -> bool:
        if token < self.marks.get(resource, 0):
            return False
        self.marks[resource] = token
        return True

    def _mismatch(self, key: str, resource: str, status: int, body: bytes) -> bool:
        """True (and the refusal checked) if `key` belongs to another resource than `resource`."""
        bound = self.bound.get(key)
        if bound is None or bound == resource:
            return False
        document = json.loads(body)
        assert (status, document["error"]) == (409, "resource_mismatch"), body
        assert (document["resource"], document["object_resource"]) == (
            self._name(resource),
            self._name(bound),
        )
        return True

    @rule(
        client=st.integers(0, 2),
        key=st.sampled_from(KEYS),
        shared=st.booleans(),
        token=st.integers(1, 12),
        data=st.binary(max_size=16),
    )
    def put(self, client: int, key: str, shared: bool, token: int, data: bytes) -> None:
        resource = SHARED if shared else key
        status, body, _ = self._request("PUT", key, SHARED if shared else None, token, data)
        if self._mismatch(key, resource, status, body):
            return
        if not self._admit(resource, token):
            assert status == 409, (client, body)
            document = json.loads(body)
            assert (document["token"], document["highest"]) == (token, self.marks[resource])
            return
        before = self.objects.get(key)
        self.bound[key] = resource
        self.objects[key] = Stored(data, token, before.version + 1 if before else 1)
        assert status == (200 if before else 201), body
        assert json.loads(body)["version"] == self.objects[key].version

    @rule(key=st.sampled_from(KEYS), shared=st.booleans(), token=st.none() | st.integers(1, 12))
    def get(self, key: str, shared: bool, token: int | None) -> None:
        resource = SHARED if shared else key
        status, body, headers = self._request("GET", key, SHARED if shared else None, token)
        if token is not None and self._mismatch(key, resource, status, body):
            return
        if token is not None and not self._admit(resource, token):
            assert status == 409
            return
        if token is not None:
            self.bound.setdefault(key, resource)
        stored = self.objects.get(key)
        if stored is None:
            assert status == 404
            return
        assert (status, body) == (200, stored.data)
        assert (headers["Fencing-Token"], headers["Object-Version"]) == (
            str(stored.token),
            str(stored.version),
        )

    @rule(key=st.sampled_from(KEYS), shared=st.booleans(), token=st.integers(1, 12))
    def delete(self, key: str, shared: bool, token: int) -> None:
        resource = SHARED if shared else key
        status, body, _ = self._request("DELETE", key, SHARED if shared else None, token)
        if self._mismatch(key, resource, status, body):
            return
        if not self._admit(resource, token):
            assert status == 409
            return
        self.bound.setdefault(key, resource)
        assert status == (200 if self.objects.pop(key, None) else 404)

    def teardown(self) -> None:
        """Every mark the server holds equals the model's (each step already checked its own answer)."""
        for resource in (*KEYS, SHARED):
            _, body, _ = call("GET", f"{self.url}/v1/fences/{self._name(resource)}", headers={})
            assert json.loads(body)["highest"] == self.marks.get(resource, 0)


def test_random_interleavings_match_the_fence_model(gateway_url: str) -> None:
    run_state_machine_as_test(
        lambda: FenceMachine(gateway_url),  # type: ignore[arg-type]  # hypothesis accepts any factory
        settings=settings(
            max_examples=30,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
