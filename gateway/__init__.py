"""The fencegate gateway: an aiohttp server that refuses stale fencing tokens.

The names below load on first use, so that reading the settings (`fencegate
serve --help`) does not load the server.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.app import create_app
    from gateway.config import Settings
    from gateway.errors import BadSetting, GatewayServerError, Refusal

__all__ = ["BadSetting", "GatewayServerError", "Refusal", "Settings", "create_app"]

_HOMES = {
    "create_app": "gateway.app",
    "Settings": "gateway.config",
    "BadSetting": "gateway.errors",
    "GatewayServerError": "gateway.errors",
    "Refusal": "gateway.errors",
}


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module 'gateway' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)
