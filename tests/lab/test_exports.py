"""Each lab package's public surface is deliberate: every name in `__all__` exists, once."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("package", ["fencegate.lab", "fencegate.lab.faults", "fencegate.lab.scenarios"])
def test_every_name_in_all_exists(package: str) -> None:
    module = importlib.import_module(package)
    assert len(set(module.__all__)) == len(module.__all__)
    assert all(hasattr(module, name) for name in module.__all__)
