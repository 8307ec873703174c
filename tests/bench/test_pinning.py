"""Pinning holds every thread of a real process to the CPUs named, the ones it starts meanwhile too, and
gives them all back every CPU the bench had when the block ends."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fencegate.bench.pinning import can_pin, pinned, split_cpus

pytestmark = pytest.mark.skipif(not can_pin(), reason="needs two CPUs and sched_setaffinity")

# a process with a thread that starts a second one when told, and a pipe to tell it
THREADS = """
import sys, threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
sys.stdin.readline()
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("started", flush=True)
sys.stdin.readline()
"""


def _cpus(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")]


def test_every_thread_is_pinned_until_the_block_ends() -> None:
    store, rest = split_cpus()
    assert store
    assert rest
    assert not store & rest
    everything = os.sched_getaffinity(0)
    with subprocess.Popen(
        [sys.executable, "-c", THREADS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            with pinned([(lambda: [proc.pid], store)]):
                assert all(cpus == store for cpus in _cpus(proc.pid))
                proc.stdin.write("\n")
                proc.stdin.flush()
                assert proc.stdout.readline() == "started\n"  # a thread started under the pin inherits it
                assert len(_cpus(proc.pid)) >= 3
                assert all(cpus == store for cpus in _cpus(proc.pid))
            assert all(cpus == everything for cpus in _cpus(proc.pid))
        finally:
            proc.kill()


def test_a_process_gone_before_the_pin_is_skipped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=10)
    with pinned([(lambda: [proc.pid], split_cpus()[0])]):
        pass
