"""The safety lab: the same workload on real processes and real faults, Redis-only vs fenced."""
