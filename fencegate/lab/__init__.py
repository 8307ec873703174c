"""The safety lab: the same workload on real processes and real faults, a lock alone vs fenced.

The package root exports the pure parts (the history, the checker, the
report); the parts that start processes or talk to servers live in their own
modules (`lab.runner`, `lab.scenarios`, `lab.faults`, `lab.locks`, `lab.leases`,
`lab.gateway_store`, `lab.gateway_process`, `lab.sql_store`, `lab.sql_deployment`,
`lab.proxy_store`, `lab.proxy_deployment`, `lab.unconditional_serve`, `lab.session`) so that
importing `lab.cluster` or reading a history stays light.
"""

from fencegate.lab.checker import Verdict, check
from fencegate.lab.errors import CheckerError, FaultError, HistoryError, LabError, RunnerError, StoreError
from fencegate.lab.history import Event, History, Meta
from fencegate.lab.report import RunResult, summary, table, to_json

__all__ = [
    "CheckerError",
    "Event",
    "FaultError",
    "History",
    "HistoryError",
    "LabError",
    "Meta",
    "RunResult",
    "RunnerError",
    "StoreError",
    "Verdict",
    "check",
    "summary",
    "table",
    "to_json",
]
