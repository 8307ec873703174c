"""`PrometheusObserver` counts what real leases did, and `logging` says it with resource and token.

A private cluster of three Redis masters: a lease is acquired, renewed by its
watchdog, contended, released, and lost when two masters are killed; the
registry's samples and the `lockclient` log records are read afterwards. The
extra is honest: nothing imports prometheus_client until the module is used,
and without it the error names the extra.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from fencegate.lab.cluster import ClusterSpec, LocalCluster
from lockclient import LockNotAcquired, QuorumUnavailable, Redlock, RetryPolicy, SQLiteTokens
from lockclient.prometheus import PrometheusObserver
from tests.lockclient.processes import ROOT
from tests.waiting import eventually


async def test_metrics_and_log_records_follow_a_real_acquire_renewal_release_and_loss(
    cluster_factory: Callable[[ClusterSpec], LocalCluster], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lockclient")
    cluster = await asyncio.to_thread(cluster_factory, ClusterSpec(redis=3))
    registry = CollectorRegistry()

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(f"lockclient_{name}", labels) or 0.0

    retry = RetryPolicy(unreachable=0.5)
    async with Redlock(
        cluster.redis_urls, tokens=SQLiteTokens(tmp_path / "t.db"), node_timeout=0.2, retry=retry,
        observer=PrometheusObserver(registry=registry),
    ) as locker:  # fmt: skip
        kept = await locker.acquire("kept", ttl=1.5, auto_extend=True)
        await eventually(lambda: sample("renewals_total") >= 1, within=30, what="a renewal")
        async with locker.lock("short", ttl=10.0) as short:
            with pytest.raises(LockNotAcquired):
                await locker.acquire("short", blocking=False, owner="another")
            with pytest.raises(LockNotAcquired):
                await locker.acquire("short", timeout=0.3, owner="another")
        assert sample("acquire_seconds_count", outcome="acquired") == 2
        assert sample("acquire_attempts_count", outcome="timeout") >= 1
        assert sample("acquire_retries_total", reason="held") >= 1
        assert sample("leases_released_total") == 1
        assert sample("lease_held_seconds_count") == 1

        for name in ("redis-0", "redis-1"):
            await asyncio.to_thread(cluster.kill, name)
        async with asyncio.timeout(60):
            await kept.wait_lost()
        await eventually(lambda: sample("leases_lost_total") == 1, what="the loss counted")
        assert sample("renewal_failures_total") >= 1
        with pytest.raises(QuorumUnavailable):
            await locker.acquire("elsewhere", ttl=1.0)
        assert sample("acquire_seconds_count", outcome="unreachable") == 1
        assert sample("acquire_retries_total", reason="unreachable") >= 1
        dead = {url.split("@")[-1] for url in cluster.redis_urls[:2]}
        failed = {
            s.labels["master"].split("@")[-1]: s.value
            for metric in registry.collect()
            if metric.name == "lockclient_master_failures"
            for s in metric.samples
            if s.name.endswith("_total")
        }
        assert dead <= set(failed)
        assert str(cluster.redis_urls[2]).split("@")[-1] not in failed  # the live one never failed

    changes = {
        "acquired": ("kept", kept.token),
        "renewed": ("kept", kept.token),
        "renewing": ("kept", kept.token),  # the failed renewal, retried
        "lost": ("kept", kept.token),
        "released": ("short", short.token),
    }
    for word, (resource, token) in changes.items():
        records = [r for r in caplog.records if r.name == "lockclient" and r.getMessage().startswith(word)]
        assert any(
            (getattr(r, "resource", None), getattr(r, "token", None)) == (resource, token) for r in records
        ), (word, [r.getMessage() for r in records])


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_prometheus_client_is_not_imported_unless_the_observer_is_used() -> None:
    done = _python("import sys, lockclient, lockclient.sync; print('prometheus_client' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_without_prometheus_client_the_error_names_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['prometheus_client'] = None\n"
        "from lockclient import MissingExtra\n"
        "try:\n"
        "    import lockclient.prometheus\n"
        "except MissingExtra as exc:\n"
        "    print(exc.extra, exc.name, exc)\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("prometheus prometheus_client ")
    assert "pip install 'fencegate[prometheus]'" in done.stdout
