"""What the gateway would refuse, `fence()` refuses before anything is sent, with the library's typed
errors; a lease the client knows is lost raises `LockLost`; a database without the marks table is
named as such. The database is watched for statements: none is sent for a refused call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text

from lockclient.errors import ConfigurationError, LockLost
from lockclient.lease import Lease
from lockclient.sql import create_marks, fence

BAD_TOKENS = [0, -1, 2**63, True, False, 1.5, "5", None]
BAD_RESOURCES = ["", "a b", "a,b", "a/../b", "./a", "a//b", "x" * 257, "tab\there", 5, b"orders"]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = create_engine(f"sqlite:///{tmp_path / 'bad.db'}")
    with made.begin() as conn:
        create_marks(conn)
    yield made
    made.dispose()


@pytest.fixture
def sent(engine: Engine) -> list[str]:
    """Every statement the engine sends from now on."""
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    return statements


class Held:
    """A lease as `fence` reads one: a token and a resource."""

    def __init__(self, resource: Any, token: Any) -> None:
        self.resource = resource
        self.token = token


@pytest.mark.parametrize("token", BAD_TOKENS, ids=repr)
def test_a_bad_token_is_refused_before_anything_is_sent(engine: Engine, sent: list[str], token: Any) -> None:
    with engine.begin() as conn:
        with pytest.raises(ConfigurationError, match="token"):
            fence(conn, "orders", token)
        with pytest.raises(ConfigurationError, match="token"):
            fence(conn, Held("orders", token))
    assert sent == []


@pytest.mark.parametrize("resource", BAD_RESOURCES, ids=lambda r: repr(r)[:20])
def test_a_bad_resource_is_refused_before_anything_is_sent(
    engine: Engine, sent: list[str], resource: Any
) -> None:
    with engine.begin() as conn:
        with pytest.raises(ConfigurationError, match="resource"):
            fence(conn, resource, 5)
        with pytest.raises(ConfigurationError, match="resource"):
            fence(conn, Held(resource, 5))
    assert sent == []


def test_a_lost_lease_raises_lock_lost_and_sends_nothing(engine: Engine, sent: list[str]) -> None:
    expired = Lease(
        resource="orders",
        token=9,
        key="lock:orders",
        value="9:00",
        ttl=1.0,
        deadline=1.0,
        drawn_at=0.0,
        granted_at=0.0,
        nodes={},
        clock=lambda: 2.0,  # past the deadline: the validity ran out
        owner=None,
    )
    with engine.begin() as conn, pytest.raises(LockLost) as lost:
        fence(conn, expired)
    assert (lost.value.resource, lost.value.token) == ("orders", 9)
    assert sent == []


def test_a_lease_and_a_token_or_a_resource_without_one_is_refused(engine: Engine, sent: list[str]) -> None:
    with engine.begin() as conn:
        with pytest.raises(ConfigurationError, match="needs the token"):
            fence(conn, "orders")  # type: ignore[call-overload]
        with pytest.raises(ConfigurationError, match="resource"):
            fence(conn, Held("orders", 5), 5)  # type: ignore[call-overload]
    assert sent == []


def test_something_else_than_a_connection_is_refused(engine: Engine) -> None:
    with pytest.raises(ConfigurationError, match="Connection, Session, AsyncConnection or AsyncSession"):
        fence(engine, "orders", 5)  # type: ignore[call-overload]


def test_a_database_without_the_marks_table_is_named_so(tmp_path: Path) -> None:
    bare = create_engine(f"sqlite:///{tmp_path / 'bare.db'}")
    try:
        with bare.begin() as conn, pytest.raises(ConfigurationError, match="create_marks"):
            fence(conn, "orders", 5)
        with bare.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM sqlite_master")) == 0  # nothing created
    finally:
        bare.dispose()
