"""`fencegate audit verify` on a store whose tables were edited to hold what fencegate never writes: each
kind of edit is a named violation with exit 1, in text and in `--json`, never a traceback.

SQLite keeps any value in any column, text that is not UTF-8 too (the driver fails a whole read on it);
PostgreSQL enforces the types but holds times Python cannot, and a hostile administrator can drop a NOT
NULL. Each test writes a trail of `ENTRIES` accepted entries to a real database of its own, edits it
with plain SQL, and runs the command as an operator would; on SQLite, the file is the same bytes after.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text

from fencegate.lab.cluster import LocalCluster
from storage import SqlObjectStore, migrate, open_engine
from tests.databases import fresh_database

ENTRIES = 4
_MAIN = "import sys; from fencegate.cli import main; sys.exit(main(sys.argv[1:]))"


@dataclass(frozen=True)
class Edit:
    """SQL run on the trail, and what `audit verify` must say of it."""

    sql: Sequence[str]
    says: str  # in the violation
    entry: int | None = None  # the entry it names, if the edit is of an entry
    breaks: int = 1  # violations: an edited hash breaks the link to the entry after it too


NOT_UTF8 = "CAST(x'ff' AS TEXT)"  # SQLite keeps it as text, and its driver fails the read of any row

SQLITE = {
    "text-in-an-integer-column": Edit(
        ["UPDATE fencegate_audit SET token = 'abc' WHERE id = 2"], "token holds 'abc', not an integer", 2
    ),
    "text-that-is-no-time": Edit(
        ["UPDATE fencegate_audit SET at = 'yesterday' WHERE id = 2"], "at holds 'yesterday', not a time", 2
    ),
    "a-time-in-another-form": Edit(  # parses to the same time: it verified as untouched before
        ["UPDATE fencegate_audit SET at = replace(at, ' ', 'T') WHERE id = 3"],
        "not a time as fencegate writes one",
        3,
    ),
    "a-blob-in-a-text-column": Edit(
        ["UPDATE fencegate_audit SET client = x'00ff' WHERE id = 2"],
        "client holds b'\\x00\\xff', not text",
        2,
    ),
    "an-integer-past-2-63": Edit(  # SQLite keeps it as a float
        ["UPDATE fencegate_audit SET token = 99999999999999999999 WHERE id = 2"],
        "token holds 1e+20, not an integer",
        2,
    ),
    "an-id-below-1": Edit(  # the read started above 0: it verified as an archived start before
        ["UPDATE fencegate_audit SET id = -5 WHERE id = 1"], "id -5 is below 1", -5
    ),
    "text-in-the-head-row": Edit(
        ["UPDATE fencegate_audit_head SET last_id = 'abc'"],
        "head row (fencegate_audit_head) is malformed: last_id holds 'abc', not an integer",
    ),
    "text-in-the-schema-row": Edit(
        ["UPDATE fencegate_schema SET version = 'abc'"],
        "schema version row (fencegate_schema) is malformed: version holds 'abc', not an integer",
    ),
    "text-in-a-mark": Edit(
        ["UPDATE fencegate_fences SET token = 'abc'"],
        "the mark of resource 'r' is malformed: token holds 'abc', not an integer",
    ),
    **{
        f"text-that-is-not-utf-8-in-{column}": Edit(
            [f"UPDATE fencegate_audit SET {column} = {NOT_UTF8} WHERE id = 3"],  # noqa: S608 (our names)
            f"{column} holds b'\\xff', text that is not UTF-8",
            3,
        )
        for column in ("client", "method", "key", "resource", "outcome", "at", "token")
    },
    "an-encoded-surrogate": Edit(  # not UTF-8 either, though it has UTF-8's form
        ["UPDATE fencegate_audit SET key = CAST(x'eda080' AS TEXT) WHERE id = 2"],
        "key holds b'\\xed\\xa0\\x80', text that is not UTF-8",
        2,
    ),
    "text-that-is-not-utf-8-in-the-hash": Edit(
        ["UPDATE fencegate_audit SET chain = CAST(x'ff' AS TEXT) WHERE id = 2"],
        "chain holds b'\\xff', text that is not UTF-8",
        2,
        breaks=2,
    ),
    "a-blob-of-utf-8-in-a-text-column": Edit(  # read as bytes like text now, still not text
        ["UPDATE fencegate_audit SET method = x'505554' WHERE id = 2"], "method holds b'PUT', not text", 2
    ),
    "text-that-is-not-utf-8-in-the-head-row": Edit(
        ["UPDATE fencegate_audit_head SET hash = CAST(x'ff' AS TEXT)"],
        "head row (fencegate_audit_head) is malformed: hash holds b'\\xff', text that is not UTF-8",
    ),
    "text-that-is-not-utf-8-in-a-mark": Edit(
        ["UPDATE fencegate_fences SET resource = CAST(x'ff' AS TEXT)"],
        "a mark (fencegate_fences) is malformed: resource holds b'\\xff', text that is not UTF-8",
    ),
    "text-that-is-not-utf-8-in-the-schema-row": Edit(
        ["UPDATE fencegate_schema SET version = CAST(x'ff' AS TEXT)"],
        "schema version row (fencegate_schema) is malformed: version holds b'\\xff', text that is not UTF-8",
    ),
}
POSTGRESQL = {
    "a-time-beyond-python": Edit(
        ["UPDATE fencegate_audit SET at = '20000-01-01' WHERE id = 2"],
        "at holds '20000-01-01 00:00:00+00', beyond the times fencegate writes",
        2,
    ),
    "a-time-before-year-1": Edit(
        ["UPDATE fencegate_audit SET at = '0001-01-01 BC' WHERE id = 3"],
        "beyond the times fencegate writes",
        3,
    ),
    "null-where-fencegate-writes-a-value": Edit(
        [
            "ALTER TABLE fencegate_audit ALTER COLUMN outcome DROP NOT NULL",
            "UPDATE fencegate_audit SET outcome = NULL WHERE id = 2",
        ],
        "outcome holds nothing (NULL)",
        2,
    ),
    "an-id-below-1": Edit(["UPDATE fencegate_audit SET id = 0 WHERE id = 1"], "id 0 is below 1", 0),
    "a-schema-version-below-1": Edit(
        ["UPDATE fencegate_schema SET version = -1"],
        "schema version row (fencegate_schema) is malformed: version holds -1, not a schema version",
    ),
}


async def _trail(url: str, edit: Edit) -> None:
    engine = open_engine(url)
    try:
        await migrate(engine)
        store = SqlObjectStore(engine)
        for token in range(1, ENTRIES + 1):
            await store.put("k/a", b"x", resource="r", token=token)
        async with engine.begin() as conn:
            for sql in edit.sql:
                await conn.execute(text(sql))
    finally:
        await engine.dispose()


def _verify(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    run = [sys.executable, "-c", _MAIN, "audit", "verify", "--storage", url, *args]
    return subprocess.run(run, capture_output=True, text=True, timeout=60, check=False)


def _check(url: str, edit: Edit) -> None:
    plain = _verify(url)
    assert "Traceback" not in plain.stderr, plain.stderr
    assert plain.returncode == 1, (plain.stdout, plain.stderr)
    violations = [line.strip() for line in plain.stdout.splitlines() if edit.says in line]
    assert violations, plain.stdout
    if edit.entry is not None:
        assert violations == [f"entry {edit.entry}: malformed entry: {violations[0].split(': ', 2)[2]}"]
        assert f"TAMPERED: the chain breaks first at entry {edit.entry}" in plain.stdout
        assert f"VIOLATIONS: {edit.breaks}" in plain.stdout  # the chain went on from the stored hash
    machine = _verify(url, "--json")
    assert "Traceback" not in machine.stderr, machine.stderr
    assert machine.returncode == 1
    report = json.loads(machine.stdout)
    assert report["ok"] is False
    assert [v for v in report["violations"] if edit.says in v] == violations
    if edit.entry is not None:
        assert (report["first_break"], report["malformed"]) == (edit.entry, [edit.entry])


@pytest.mark.parametrize("kind", list(SQLITE))
async def test_an_edited_sqlite_store_is_a_named_violation(kind: str, tmp_path: Path) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'fencegate.db'}"
    await _trail(sqlite_url, SQLITE[kind])
    before = _contents(tmp_path)
    await asyncio.to_thread(_check, sqlite_url, SQLITE[kind])
    assert _contents(tmp_path) == before


def _contents(directory: Path) -> dict[str, str]:
    """The digest of each file the SQLite store keeps (the database, its WAL if any)."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.glob("fencegate.db*"))
        if path.suffix != ".db-shm"  # the WAL's index is shared memory, rewritten by any reader
    }


@pytest.mark.parametrize("kind", list(POSTGRESQL))
async def test_an_edited_postgresql_store_is_a_named_violation(
    kind: str, postgres_cluster: LocalCluster
) -> None:
    async with fresh_database(postgres_cluster, "malformed") as url:
        await _trail(url, POSTGRESQL[kind])
        await asyncio.to_thread(_check, url, POSTGRESQL[kind])


def _serve_and_stop(url: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """Start a gateway on `url`, wait until it listens, stop it as a supervisor does (SIGTERM)."""
    run = [sys.executable, "-c", _MAIN, "serve", "--storage", url, "--port", "0", "--data-dir", str(data_dir)]
    with subprocess.Popen(run, stderr=subprocess.PIPE, text=True) as gateway:
        assert gateway.stderr is not None
        said: list[str] = []
        for line in gateway.stderr:  # ends early if the gateway exits instead
            said.append(line)
            if "gateway listening on" in line:
                gateway.send_signal(signal.SIGTERM)
                break
        rest = gateway.communicate(timeout=30)[1]
        return subprocess.CompletedProcess(run, gateway.returncode, "", "".join(said) + rest)


async def test_a_gateway_stops_with_a_warning_on_an_edited_head_row(tmp_path: Path) -> None:
    """The head is logged at shutdown, to be kept: an edited head row is a warning there, not a traceback
    (it failed the shutdown)."""
    sqlite_url = f"sqlite:///{tmp_path / 'fencegate.db'}"
    await _trail(sqlite_url, Edit(["UPDATE fencegate_audit_head SET last_id = 'abc'"], ""))
    stopped = await asyncio.to_thread(_serve_and_stop, sqlite_url, tmp_path)
    assert "Traceback" not in stopped.stderr, stopped.stderr
    assert stopped.returncode in (0, 143), stopped.stderr  # stopped, or terminated as it finished starting
    warning = "WARNING gateway: audit chain head not read at shutdown: last_id holds 'abc', not an integer"
    assert warning in stopped.stderr
