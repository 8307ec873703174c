"""The fencegate gateway: an aiohttp server that refuses stale fencing tokens."""

from gateway.app import create_app
from gateway.config import Settings
from gateway.errors import ConfigError, GatewayServerError, Refusal

__all__ = ["ConfigError", "GatewayServerError", "Refusal", "Settings", "create_app"]
