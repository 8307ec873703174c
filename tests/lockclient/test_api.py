"""The public surface: what `lockclient` exports, and bad arguments refused with the fix."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest

import lockclient
import lockclient.sync
import lockclient.tokens
import lockclient.transport
from lockclient import (
    ConfigurationError,
    Fenced,
    Lease,
    Redlock,
    RetryPolicy,
    SQLiteTokens,
    TokenSource,
    token_of,
)


@pytest.mark.parametrize("module", [lockclient, lockclient.tokens, lockclient.sync, lockclient.transport])
def test_all_names_exist_and_are_unique(module: object) -> None:
    names = module.__all__  # type: ignore[attr-defined]
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(module, name), name


def test_the_contract_names_are_importable() -> None:
    required = {
        "Redlock", "Lease", "SQLiteTokens", "PostgresTokens", "ZooKeeperTokens", "RedisIncrTokens",
        "open_token_source", "LockClientError", "ConfigurationError", "LockNotAcquired", "LockLost",
        "TokenSourceError", "GatewayError", "StaleToken",
    }  # fmt: skip
    assert required <= set(lockclient.__all__)
    for name in ("SQLiteTokens", "PostgresTokens", "ZooKeeperTokens", "RedisIncrTokens"):
        assert issubclass(getattr(lockclient, name), TokenSource)


def test_kazoo_is_imported_by_one_module_only() -> None:
    import pathlib

    root = pathlib.Path(lockclient.__file__).parent
    users = [
        p.relative_to(root)
        for p in root.rglob("*.py")
        if "import kazoo" in p.read_text() or "from kazoo" in p.read_text()
    ]
    assert [str(p) for p in users] == ["tokens/zookeeper.py"]
    assert importlib.import_module("lockclient.tokens.zookeeper")


def test_a_lease_with_a_token_is_fenced() -> None:
    def needs_fenced(fenced: Fenced) -> int:
        return fenced.token

    lease: Lease[int] = Lease(
        resource="r", token=7, key="k", value="7:ab", ttl=1.0, deadline=1.0, drawn_at=0.0, granted_at=0.0,
        nodes={}, clock=lambda: 0.5, owner=None,
    )  # fmt: skip
    assert needs_fenced(lease) == 7
    assert lease.remaining() == 0.5
    assert token_of("7:ab") == 7
    assert token_of(b"-:ab") is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"masters": []}, "non-empty list"),
        ({"masters": "redis://h:1"}, "non-empty list"),
        ({"masters": ["redis://h:1", "redis://h:1"]}, "twice"),
        ({"masters": ["http://h:1"]}, "not a Redis URL"),
        ({"masters": ["redis://h:1"], "ttl": 0}, "ttl must be"),
        ({"masters": ["redis://h:1"], "ttl": 0.01}, "much smaller than ttl"),
        ({"masters": ["redis://h:1"], "node_timeout": float("nan")}, "node_timeout"),
        ({"masters": ["redis://h:1"], "watchdog_fraction": 1.5}, "watchdog_fraction"),
        ({"masters": ["redis://h:1"], "drift_factor": -1}, "drift_factor"),
        ({"masters": ["redis://h:1"], "max_extensions": -1}, "max_extensions"),
    ],
)
def test_bad_redlock_arguments_are_refused_with_the_fix(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Redlock(**kwargs)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"attempts": 0}, "attempts"), ({"delay": -1.0}, "delay"), ({"poll": 0.0}, "poll")],
)
def test_bad_retry_policies_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_a_source_known_only_at_run_time_types_as_optional(tmp_path: Path) -> None:
    maybe: TokenSource | None = SQLiteTokens(tmp_path / "t.db") if tmp_path else None
    locker: Redlock[int | None] = Redlock(["redis://127.0.0.1:1"], tokens=maybe)
    assert locker.settings.reentrant is False


def test_settings_are_frozen() -> None:
    locker = Redlock(["redis://127.0.0.1:1"], ttl=5.0)
    assert locker.settings.ttl == 5.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        locker.settings.ttl = 1.0  # type: ignore[misc]


async def test_bad_acquire_arguments_change_nothing(urls: list[str]) -> None:
    async with Redlock(urls) as locker:
        with pytest.raises(ConfigurationError, match="resource"):
            await locker.acquire("")
        with pytest.raises(ConfigurationError, match="timeout"):
            await locker.acquire("x", timeout=-1)
    with pytest.raises(ConfigurationError, match="closed"):
        await locker.acquire("x")
