"""The lab's `Deployment` with the counter in a user's table on PostgreSQL instead of behind the gateway.

The lock half is the gateway deployment's own (`Locks`): the same designs,
modes and token sources. What changes is the store each client builds
(`lab.sql_store`), named by the run's store:

| store | mode | the client's transactions |
|---|---|---|
| `sql` | `lock-only` | a plain SELECT, then a plain UPDATE: nothing checks the lease |
| `sql` | `fenced`, `fence-only` | `fence(conn, resource, token)`, then the SELECT or the UPDATE |
| `sql-trigger` | `fenced` | a plain SELECT; an UPDATE that sets the token column (trigger) |

`seed` creates the table if it is missing, the marks table (`create_marks`)
or the trigger (`install_statements`, idempotent) and the run's row at 0;
`final` reads the row back from the table itself, which is what the checker
compares with the acknowledged increments. The trigger's table runs
`fenced` only: with no token to write, its lock-only row would be the `sql`
store's; and without a lock (`fence-only`) two clients read the same value
unchecked and write it in token order, a lost update the trigger cannot
see, since it fences writes and a table sees nothing of a read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from fencegate.lab.deployments import Locks
from fencegate.lab.errors import LabError
from fencegate.lab.protocols import Component
from fencegate.lab.sql_store import (
    CREATE,
    RESOURCE_COLUMN,
    SEED,
    TABLE,
    TOKEN_COLUMN,
    TRIGGER_TABLE,
    Fencing,
    open_engine,
    read_value,
    store_errors,
)
from lockclient.sql import create_marks, install_statements

SQL = "sql"
TRIGGER = "sql-trigger"
STORES: dict[str, tuple[str, Fencing]] = {  # store -> its table, and how its fenced modes fence
    SQL: (TABLE, "call"),
    TRIGGER: (TRIGGER_TABLE, "trigger"),
}
SEED_TOKEN = 1  # the trigger refuses a row without a token; every token a source draws is >= 1
TRIGGER_MODE = "fenced"  # the one mode the trigger's store runs (see the module docstring)


@dataclass(frozen=True)
class SqlDeployment:
    """One mode and lock design, the counter a row of a user table; `resource` fresh per run."""

    locks: Locks
    store_name: str
    url: str  # the PostgreSQL the session runs (postgresql://...)
    resource: str

    def __post_init__(self) -> None:
        if self.store_name not in STORES:
            raise LabError(f"unknown sql store {self.store_name!r}: use one of {', '.join(STORES)}")
        if self.store_name == TRIGGER and self.locks.mode != TRIGGER_MODE:
            raise LabError(f"the {TRIGGER} store runs {TRIGGER_MODE} only, not {self.locks.mode}")

    @property
    def table(self) -> str:
        return STORES[self.store_name][0]

    @property
    def fencing(self) -> Fencing:
        return "none" if self.locks.mode == "lock-only" else STORES[self.store_name][1]

    @property
    def lock_nodes(self) -> int:
        return self.locks.lock_nodes

    @property
    def store_address(self) -> tuple[str, int]:
        try:
            parsed = make_url(self.url)
        except ArgumentError as exc:
            raise LabError(f"the sql store's URL cannot be read ({exc})") from exc
        return parsed.host or "127.0.0.1", parsed.port or 5432

    def lock(self, urls: Sequence[str], *, tokens: str) -> Component:
        return self.locks.lock(urls, tokens=tokens)

    def store(self, address: tuple[str, int]) -> Component:
        """The clients' store; `address` is PostgreSQL's, or a proxy in front of it."""
        url = make_url(self.url).set(host=address[0], port=address[1]).render_as_string(hide_password=False)
        kwargs = {"url": url, "table": self.table, "resource": self.resource, "fencing": self.fencing}
        return Component("fencegate.lab.sql_store:counter", kwargs)

    async def seed(self) -> None:
        """Create the user's table, the marks and the trigger if missing, and the run's counter row at 0,
        before the clients start."""
        engine = open_engine(self.url)
        trigger = self.store_name == TRIGGER
        try:
            with store_errors(f"seed of {self.resource}"):
                async with engine.begin() as conn:
                    await conn.exec_driver_sql(CREATE.format(table=self.table))
                    if trigger:
                        for statement in install_statements(
                            "postgresql",
                            table=self.table,
                            token_column=TOKEN_COLUMN,
                            resource_column=RESOURCE_COLUMN,
                        ):
                            await conn.exec_driver_sql(statement)
                    else:
                        await conn.run_sync(create_marks)
                    seed = {"resource": self.resource, "token": SEED_TOKEN if trigger else None}
                    await conn.execute(text(SEED.format(table=self.table)), seed)
        finally:
            await engine.dispose()

    async def final(self) -> int:
        engine = open_engine(self.url)
        try:
            with store_errors(f"final read of {self.resource}"):
                async with engine.connect() as conn:
                    return await read_value(conn, self.table, self.resource)
        finally:
            await engine.dispose()


__all__ = ["SQL", "STORES", "TRIGGER", "TRIGGER_MODE", "SqlDeployment"]
