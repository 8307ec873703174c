"""Errors of the model runner: one root, each message says what to do.

ModelError
 ├── ModelArgumentError (ValueError)  an option the model cannot take (a size, a variant name)
 ├── ToolMissing      spin or gcc is not on PATH
 ├── BuildError       spin -a or gcc rejected the model (a bad -D combination)
 ├── SearchError      ./pan stopped without a verdict it could state
 └── TrailError       a counterexample trail could not be replayed or read
"""

from __future__ import annotations


class ModelError(Exception):
    """Root of every error raised by `model`."""


class ModelArgumentError(ModelError, ValueError):
    """An option names a variant or a size the model does not have; the message lists what it has."""


class ToolMissing(ModelError):
    def __init__(self, message: str, *, tool: str) -> None:
        super().__init__(message)
        self.tool = tool


class BuildError(ModelError):
    def __init__(self, message: str, *, command: str, output: str) -> None:
        super().__init__(f"{message}\n$ {command}\n{output.strip()}")
        self.command = command
        self.output = output


class SearchError(ModelError):
    def __init__(self, message: str, *, output: str) -> None:
        super().__init__(f"{message}\n{output.strip()}")
        self.output = output


class TrailError(ModelError):
    pass


__all__ = ["BuildError", "ModelArgumentError", "ModelError", "SearchError", "ToolMissing", "TrailError"]
