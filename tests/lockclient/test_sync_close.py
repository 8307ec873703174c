"""Closing a blocking facade never strands a caller, and a facade call on the loop thread is refused.

Every call that could hang on a broken facade runs in a thread joined under a
deadline, so a regression fails the test instead of hanging the run.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from lockclient import ConfigurationError, GatewayRetry, Lease
from lockclient.sync import GatewayClient, Redlock
from tests.waiting import eventually_sync

DEADLINE = 10.0


class Outcome:
    """What a call made on another thread returned or raised."""

    def __init__(self) -> None:
        self.value: Any = None
        self.error: BaseException | None = None


def in_thread(call: Callable[[], object]) -> tuple[threading.Thread, Outcome]:
    outcome = Outcome()

    def target() -> None:
        try:
            outcome.value = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.error = exc

    thread = threading.Thread(target=target, daemon=True)  # daemon: a hung call must not hang the run
    thread.start()
    return thread, outcome


def finished(call: Callable[[], object]) -> Outcome:
    """Run `call` on another thread and fail if it has not returned within the deadline."""
    thread, outcome = in_thread(call)
    thread.join(DEADLINE)
    assert not thread.is_alive(), f"the call did not return within {DEADLINE} s"
    return outcome


class CountingClock:
    """The default clock, counting its readings: each acquire attempt reads it."""

    def __init__(self) -> None:
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return time.monotonic()


def test_closing_a_sync_redlock_wakes_an_acquire_in_flight_with_a_typed_error(
    urls: list[str], resource: str
) -> None:
    clock = CountingClock()
    locker = Redlock(urls, ttl=30.0, clock=clock)
    locker.acquire(resource)  # held: the waiter below retries until it is told to stop
    before = clock.readings
    waiter, waited = in_thread(lambda: locker.acquire(resource, timeout=None))
    eventually_sync(lambda: clock.readings > before + 2, what="the waiter's acquire attempts")

    assert finished(locker.close).error is None
    waiter.join(DEADLINE)
    assert not waiter.is_alive(), "the waiter is still blocked after close()"
    assert isinstance(waited.error, ConfigurationError)
    assert "closed" in str(waited.error)


def test_closing_a_sync_gateway_client_wakes_a_request_in_flight() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:  # accepts, never answers
        server.settimeout(DEADLINE)
        port = server.getsockname()[1]
        gateway = GatewayClient(f"http://127.0.0.1:{port}", timeout=60.0, retry=GatewayRetry(attempts=1))
        caller, called = in_thread(lambda: gateway.fence("r"))
        connection, _ = server.accept()
        with connection:
            connection.settimeout(DEADLINE)
            request = b""
            while b"\r\n\r\n" not in request:  # the whole request arrived: the client awaits the answer
                request += connection.recv(4096)
            assert finished(gateway.close).error is None
            caller.join(DEADLINE)  # well before the client's own 60 s timeout
            assert not caller.is_alive(), "the caller is still blocked after close()"
    assert isinstance(called.error, ConfigurationError)
    assert "closed" in str(called.error)


def test_a_call_after_close_raises_the_typed_error(urls: list[str], resource: str) -> None:
    locker = Redlock(urls)
    locker.close()
    with pytest.raises(ConfigurationError, match="is closed"):
        locker.acquire(resource)
    locker.close()  # a second close is a no-op

    gateway = GatewayClient("http://127.0.0.1:9")
    gateway.close()
    with pytest.raises(ConfigurationError, match="is closed"):
        gateway.fence("r")


def test_a_facade_call_from_on_lost_is_refused_and_the_client_keeps_working(
    urls: list[str], resource: str
) -> None:
    locker = Redlock(urls, node_timeout=0.1)
    seen: list[BaseException] = []

    def on_lost(lease: Lease[None]) -> None:  # runs on the loop thread
        for call in (lambda: locker.inspect(lease.resource), locker.close):
            try:
                call()
            except ConfigurationError as exc:
                seen.append(exc)

    try:
        locker.acquire(resource, ttl=0.6, auto_extend=True, on_lost=on_lost)
        locker.force_unlock(resource, confirm=True)  # the watchdog's next renewal finds it gone
        eventually_sync(lambda: len(seen) == 2, what="both calls from on_lost refused")
        assert all("loop thread" in str(exc) and "async" in str(exc) for exc in seen)
        later = finished(lambda: locker.acquire(f"{resource}-other", timeout=1.0))
        assert isinstance(later.value, Lease)
    finally:
        finished(locker.close)
