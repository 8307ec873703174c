"""The sync facade runs the async algorithm on its own loop thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lockclient import ConfigurationError, LockNotAcquired, SQLiteTokens
from lockclient.sync import Redlock
from tests.waiting import eventually_sync


def test_sync_lock_gives_a_fenced_lease_and_releases_it(
    urls: list[str], resource: str, tmp_path: Path
) -> None:
    with Redlock(urls, tokens=SQLiteTokens(tmp_path / "t.db"), ttl=5.0) as locker:
        with locker.lock(resource) as lease:
            assert lease.token == 1
            assert 0 < lease.remaining() < 5.0
            with pytest.raises(LockNotAcquired):  # held: a second acquire fails fast
                locker.acquire(resource, blocking=False)
        again = locker.acquire(resource, blocking=False)
        assert again.token > lease.token  # the failed attempt used up a token of its own
        locker.release(again)


def test_sync_reentrancy_is_per_thread(urls: list[str], resource: str) -> None:
    with Redlock(urls, reentrant=True) as locker:
        outer = locker.acquire(resource)
        assert locker.acquire(resource) is outer
        failures: list[BaseException] = []

        def other_thread() -> None:
            try:
                locker.acquire(resource, blocking=False)
            except LockNotAcquired as exc:
                failures.append(exc)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert len(failures) == 1
        locker.release(outer)
        locker.release(outer)
        assert outer.holds == 0


def test_sync_watchdog_renews_while_the_caller_blocks(urls: list[str], resource: str) -> None:
    with Redlock(urls, node_timeout=0.1) as locker, locker.lock(resource, ttl=0.6, auto_extend=True) as lease:
        # the caller's thread is busy with its own (blocking) work meanwhile
        eventually_sync(lambda: lease.renewals >= 3, what="three watchdog renewals")
        lease.check()


def test_a_refused_configuration_leaves_no_thread_behind() -> None:
    before = {t.name for t in threading.enumerate()}
    with pytest.raises(ConfigurationError, match="non-empty"):
        Redlock([])
    assert {t.name for t in threading.enumerate()} == before


def test_an_error_in_a_sync_block_releases_and_propagates(urls: list[str], resource: str) -> None:
    with Redlock(urls) as locker:
        with pytest.raises(KeyError), locker.lock(resource):
            raise KeyError("boom")
        locker.release(locker.acquire(resource, blocking=False))  # it was released
