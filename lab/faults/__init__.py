"""Fault injection for the lab: shifted wall clocks, a delaying TCP proxy, node faults."""

from lab.faults.clock import ClockShift, build_shim

__all__ = ["ClockShift", "build_shim"]
