"""Errors of the local cluster helper.

ClusterError
 ├── ClusterArgumentError (ValueError)  a state dir that is missing, malformed or taken; options
 │                                      that do not fit together
 ├── MissingServerError (FileNotFoundError)  a server binary is not installed
 └── ServerStartError (TimeoutError)    a server did not answer before its deadline
"""

from __future__ import annotations


class ClusterError(Exception):
    """Root of every error the cluster helper raises."""


class ClusterArgumentError(ClusterError, ValueError):
    """What was asked cannot be done as asked; the message says what to give instead."""


class MissingServerError(ClusterError, FileNotFoundError):
    """A server binary is missing; the message names the package that provides it."""

    def __init__(self, binary: str, *, package: str, installer: str = "apt-get") -> None:
        super().__init__(
            f"{binary} not found: install it with `{installer} install {package}` "
            f"(or run `make setup`, which installs every server the project uses)"
        )
        self.binary = binary
        self.package = package


class ServerStartError(ClusterError, TimeoutError):
    """A server exited or stayed silent past its start deadline."""

    def __init__(self, message: str, *, name: str, log: str) -> None:
        super().__init__(f"{name}: {message}; last lines of its log:\n{log}")
        self.name = name
