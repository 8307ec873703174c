"""API keys: stored hashed, each scoped to resource and key prefixes.

The key file is JSON: `{"keys": [{"name": "billing", "sha256": "<hex of the
secret>", "prefixes": ["billing/"]}]}`. A client sends `Authorization: Bearer
<secret>`; the gateway hashes it and looks the hash up, so the file never
holds a usable secret. Without a key file the gateway runs open, and says so
at start (DESIGN: only the embedded default on loopback should).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import ConfigError, Forbidden, Unauthorized


@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    prefixes: tuple[str, ...]

    def allows(self, name: str) -> bool:
        return any(name.startswith(prefix) for prefix in self.prefixes)


def hash_secret(secret: str) -> str:
    """What the key file stores for `secret`."""
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiKeys:
    """The configured keys, looked up by the hash of the presented secret."""

    def __init__(self, by_hash: dict[str, ApiKey]) -> None:
        self._by_hash = dict(by_hash)

    @classmethod
    def load(cls, path: Path) -> ApiKeys:
        try:
            document = json.loads(path.read_text())
            entries = document["keys"]
            by_hash = {
                str(e["sha256"]).lower(): ApiKey(name=str(e["name"]), prefixes=tuple(map(str, e["prefixes"])))
                for e in entries
            }
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"cannot read API keys from {path}: {exc}; expected "
                '{"keys": [{"name": ..., "sha256": ..., "prefixes": [...]}]}'
            ) from exc
        return cls(by_hash)

    def identify(self, authorization: str | None) -> ApiKey:
        """The key behind an `Authorization: Bearer` header, or 401."""
        scheme, _, secret = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise Unauthorized("send the API key as `Authorization: Bearer <key>`")
        key = self._by_hash.get(hash_secret(secret.strip()))
        if key is None:
            raise Unauthorized("unknown API key; ask the operator for a key scoped to your resources")
        return key

    @staticmethod
    def require(key: ApiKey, *names: str) -> None:
        """403 unless every name (resource, object key, list prefix) is under one of the key's prefixes."""
        for name in names:
            if not key.allows(name):
                raise Forbidden(
                    f"API key {key.name!r} is not allowed on {name!r}; its prefixes are {list(key.prefixes)}",
                    fields={"name": name},
                )
