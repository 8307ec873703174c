"""Fault injection for the lab: shifted wall clocks, a delaying TCP proxy, node faults."""

from fencegate.lab.faults.clock import ClockShift, build_shim
from fencegate.lab.faults.nodes import ReplicatedPair, crash_restart, paused
from fencegate.lab.faults.proxy import DelayProxy

__all__ = ["ClockShift", "DelayProxy", "ReplicatedPair", "build_shim", "crash_restart", "paused"]
