"""What the store holds once the soak stopped, read from PostgreSQL itself and not through a gateway.

The audit trail's accepted PUTs per (key, token) show each write applied
once; the unleased writers' objects show that nothing acknowledged was lost;
`verify_audit` checks the chain. A gateway's answers alone could hide a write
applied twice.
"""

from __future__ import annotations

from collections import Counter

from sqlalchemy import func, select

from storage import open_engine
from storage.models import AuditEntry, StoredObject
from storage.verify import AuditReport, verify_audit


async def read_audit(
    dsn: str, *, writers_prefix: str
) -> tuple[Counter[tuple[str, int]], dict[str, tuple[bytes, int]], AuditReport]:
    """Accepted PUTs per (key, token) in the audit trail, the objects under `writers_prefix`, the check."""
    engine = open_engine(dsn)
    try:
        async with engine.connect() as conn:
            stmt = (
                select(AuditEntry.key, AuditEntry.token, func.count())
                .where(AuditEntry.method == "PUT", AuditEntry.outcome == "accepted")
                .group_by(AuditEntry.key, AuditEntry.token)
            )
            audited: Counter[tuple[str, int]] = Counter(
                {(str(key), int(token or 0)): count for key, token, count in (await conn.execute(stmt)).all()}
            )
            rows = await conn.execute(
                select(StoredObject.key, StoredObject.data, StoredObject.version).where(
                    StoredObject.key.startswith(writers_prefix, autoescape=True)
                )
            )
            objects = {str(key): (bytes(data), int(version)) for key, data, version in rows.all()}
        return audited, objects, await verify_audit(engine)
    finally:
        await engine.dispose()
