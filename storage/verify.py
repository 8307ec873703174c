"""Offline check of the audit trail: accepted tokens never went back, per resource.

Reads `fencegate_audit` in id order (per resource, the ids of entries written
with a passed fence follow commit order: each is inserted after the fence
upsert that holds the resource's row lock) and checks:

1. per resource, the tokens of entries whose fence passed (`accepted`,
   `not_found`) never decrease (invariants 1 and 3);
2. a `stale_token` refusal carries a token below the mark it reports;
3. every resource's current mark in `fencegate_fences` is at least the
   highest token the trail accepted for it (the mark did not go back).

It needs only the database, not a running gateway, and says what it read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from storage.errors import map_storage_errors
from storage.models import AuditEntry, Fence
from storage.records import FENCE_PASSED

READ_BATCH = 10_000  # audit rows fetched per round trip


@dataclass
class AuditReport:
    """What `verify_audit` read and what it found wrong."""

    rows: int = 0
    first_id: int | None = None
    last_id: int | None = None
    outcomes: Counter[str] = field(default_factory=Counter)
    highest: dict[str, int] = field(default_factory=dict)  # per resource, the highest accepted token
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def lines(self) -> list[str]:
        """The report as text, one fact per line."""
        span = f"ids {self.first_id}..{self.last_id}" if self.rows else "no entries"
        out = [
            f"read {self.rows} audit entries ({span}) over {len(self.highest)} fenced resources",
            *(f"  {outcome}: {count}" for outcome, count in sorted(self.outcomes.items())),
        ]
        if self.violations:
            out.append(f"VIOLATIONS: {len(self.violations)}")
            out.extend(f"  {violation}" for violation in self.violations[:50])
        else:
            out.append("ok: accepted tokens never went back, and no mark is below them")
        return out


async def verify_audit(engine: AsyncEngine) -> AuditReport:
    """Check the audit trail and the marks of the database behind `engine`."""
    report = AuditReport()
    columns = (AuditEntry.id, AuditEntry.resource, AuditEntry.token, AuditEntry.mark, AuditEntry.outcome)
    with map_storage_errors("audit verification"):
        async with engine.connect() as conn:
            after = 0
            while True:
                page = (
                    await conn.execute(
                        select(*columns)
                        .where(AuditEntry.id > after)
                        .order_by(AuditEntry.id)
                        .limit(READ_BATCH)
                    )
                ).all()
                if not page:
                    break
                for row_id, resource, token, mark, outcome in page:
                    _check(report, row_id, resource, token, mark, outcome)
                after = page[-1][0]
            rows = (await conn.execute(select(Fence.resource, Fence.token))).all()
            marks: dict[str, int] = {resource: token for resource, token in rows}
    for resource, token in report.highest.items():
        mark = marks.get(resource)
        if mark is None or mark < token:
            report.violations.append(
                f"resource {resource!r}: the mark is {mark} but the trail accepted token {token}"
            )
    return report


def _check(
    report: AuditReport, row_id: int, resource: str | None, token: int | None, mark: int | None, outcome: str
) -> None:
    report.rows += 1
    report.first_id = row_id if report.first_id is None else report.first_id
    report.last_id = row_id
    report.outcomes[outcome] += 1
    if outcome in FENCE_PASSED and resource is not None and token is not None:
        before = report.highest.get(resource)
        if before is not None and token < before:
            report.violations.append(
                f"entry {row_id}: resource {resource!r} accepted token {token} after token {before}"
            )
        report.highest[resource] = max(token, before or 0)
    elif outcome == "stale_token" and token is not None and mark is not None and token >= mark:
        report.violations.append(f"entry {row_id}: token {token} refused as stale by a mark of {mark}")
