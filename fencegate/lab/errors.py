"""Every error the lab raises (the cluster helper keeps its own root, `ClusterError`).

LabError
 ├── LabArgumentError (ValueError)  options that cannot make a run; nothing was started
 ├── HistoryError (ValueError)    a history event or file is malformed; nothing was recorded
 ├── CheckerError (ValueError)    a history cannot be judged (e.g. no final counter value)
 ├── LabLockError                 a lab lock's redis node failed during release
 ├── StoreError                   a store request failed in transit; its outcome is unknown
 ├── FaultError                   a fault could not be injected or undone
 │    └── ShimBuildError          the clock shim did not compile (gcc missing or failed)
 └── RunnerError                  a client process failed, hung or broke the checkpoint protocol
"""

from __future__ import annotations


class LabError(Exception):
    """Root of every lab error."""


class LabArgumentError(LabError, ValueError):
    """The options asked for a run that cannot be made; the message says what to give instead."""


class HistoryError(LabError, ValueError):
    """An event or a history file is malformed; the message names the field and the fix."""


class CheckerError(LabError, ValueError):
    """The history lacks something the checker needs."""


class LabLockError(LabError):
    """A lab-only lock design could not reach its redis node; the lease may still be held."""

    def __init__(self, message: str, *, resource: str) -> None:
        super().__init__(message)
        self.resource = resource


class StoreError(LabError):
    """A store request failed in transit (connection lost, timeout); it may or may not have landed."""


class FaultError(LabError):
    """A fault could not be injected or undone."""


class ShimBuildError(FaultError):
    """The LD_PRELOAD clock shim could not be built."""

    def __init__(self, message: str, *, output: str = "") -> None:
        super().__init__(f"{message}\n{output}".rstrip())
        self.output = output


class RunnerError(LabError):
    """A client process exited badly, hung past its deadline or spoke out of protocol."""

    def __init__(self, message: str, *, client: str, log: str = "") -> None:
        super().__init__(f"{client}: {message}" + (f"; its stderr ends with:\n{log}" if log else ""))
        self.client = client
