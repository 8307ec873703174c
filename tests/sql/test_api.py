"""`lockclient.sql`'s surface: its names, its types as mypy --strict users see them, and an import that
pulls in nothing of the gateway, the store or the tools."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Coroutine
from typing import Any, assert_type

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

import lockclient.sql
from lockclient.protocols import Fenced
from lockclient.sql import fence


def test_all_names_exist_and_are_unique() -> None:
    names = lockclient.sql.__all__
    assert len(names) == len(set(names))
    assert all(hasattr(lockclient.sql, name) for name in names)
    assert {"fence", "fenced", "create_marks", "install_statements", "uninstall_statements"} <= set(names)


def test_the_import_loads_no_gateway_store_or_tool() -> None:
    script = "import sys\nfrom lockclient.sql import fence\nprint('\\n'.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    ours = {name.partition(".")[0] for name in loaded.stdout.split()}
    assert not ours & {"gateway", "storage", "fencegate"}


async def typed(
    conn: Connection, session: Session, aconn: AsyncConnection, asession: AsyncSession, lease: Fenced
) -> None:
    """Never called: mypy --strict checks the type each form has for a caller."""
    assert_type(fence(conn, lease), None)
    assert_type(fence(session, "orders", 5), None)
    assert_type(await fence(aconn, lease), None)
    pending = assert_type(fence(asession, "orders", 5), Coroutine[Any, Any, None])
    await pending
