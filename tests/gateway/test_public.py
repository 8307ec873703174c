"""The packages' public surfaces are deliberate: every name in `__all__` exists, once."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("package", ["gateway", "storage"])
def test_all_names_exist_once(package: str) -> None:
    module = importlib.import_module(package)
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.__all__ names {name!r}, which it does not define"
