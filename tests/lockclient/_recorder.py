"""An `Observer` that keeps every event it is given, for tests to read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lockclient.observe import Observer, Retry


@dataclass
class Recorder(Observer):
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [fields for event, fields in self.events if event == name]

    def acquired(self, resource: str, token: int | None, *, seconds: float, attempts: int) -> None:
        self.events.append(
            ("acquired", {"resource": resource, "token": token, "seconds": seconds, "attempts": attempts})
        )

    def not_acquired(self, resource: str, *, seconds: float, attempts: int, unreachable: bool) -> None:
        fields = {"resource": resource, "seconds": seconds, "attempts": attempts, "unreachable": unreachable}
        self.events.append(("not_acquired", fields))

    def retried(self, resource: str, *, reason: Retry) -> None:
        self.events.append(("retried", {"resource": resource, "reason": reason}))

    def masters_failed(self, resource: str, masters: Sequence[str]) -> None:
        self.events.append(("masters_failed", {"resource": resource, "masters": list(masters)}))

    def renewed(self, resource: str, token: int | None) -> None:
        self.events.append(("renewed", {"resource": resource, "token": token}))

    def renewal_failed(self, resource: str, token: int | None) -> None:
        self.events.append(("renewal_failed", {"resource": resource, "token": token}))

    def lost(self, resource: str, token: int | None) -> None:
        self.events.append(("lost", {"resource": resource, "token": token}))

    def released(self, resource: str, token: int | None, *, held: float) -> None:
        self.events.append(("released", {"resource": resource, "token": token, "held": held}))
