"""The trigger that fences every writer of one user table: its SQL, for PostgreSQL and SQLite.

For a table with a token column, and a resource column or one fixed resource
for the whole table, the trigger runs before each INSERT and UPDATE of a row:
it refuses a token below the resource's mark and raises the mark otherwise,
with the fence's one statement (`_marks.py`) on the mark's row. It also
refuses a missing or malformed token or resource, and an UPDATE that moves a
row to another resource (the row belongs to the resource it was written
under, as a key does at the gateway: else a stale writer would sidestep the
mark by naming a fresh resource). DELETE is not fenced: it carries no token.

PostgreSQL: one plpgsql function per table and a `BEFORE INSERT OR UPDATE
... FOR EACH ROW` trigger; refusals raise SQLSTATE `FG409` (stale: the
message names the resource, the token and the mark), `FG422` (resource
changed) or `FG400` (bad token or resource). The function keeps the
search_path of its installation, so it finds the same `fencegate_marks` as
the call does there.

SQLite: `BEFORE INSERT` and `BEFORE UPDATE` triggers that `RAISE(ABORT,
...)` (SQLite's `SQLITE_CONSTRAINT`, an `IntegrityError` in Python) with a
fixed message starting `fencegate_stale_token`, `fencegate_resource_changed`
or `fencegate_bad_token`/`fencegate_bad_resource` (SQLite's RAISE takes only
a literal, so the message cannot carry the values). Check and raise are one
step because SQLite has one writer at a time: the triggering statement holds
the database's write lock from its start to the end of its transaction, so
no other connection can move the mark between the check and the upsert, nor
before the row commits.

Every object is named `fencegate_fence_<table>`, and the schema-version table
records it (`trigger:<table>`). Nothing else of the user's is touched.
"""

from __future__ import annotations

import hashlib
import re

from lockclient.errors import ConfigurationError
from lockclient.sql._marks import MARKS_TABLE, SCHEMA_TABLE, SCHEMA_VERSION, check_dialect, marks_statements
from lockclient.wire import MAX_RESOURCE_LENGTH, RESOURCE_CHARS, resource_header

__all__ = [
    "BAD_INPUT_SQLSTATE",
    "MOVED_SQLSTATE",
    "STALE_SQLSTATE",
    "install_statements",
    "object_name",
    "split_table",
    "uninstall_statements",
]

STALE_SQLSTATE = "FG409"  # the token is below the mark (as the gateway's 409 stale_token)
MOVED_SQLSTATE = "FG422"  # an UPDATE names another resource than the row's
BAD_INPUT_SQLSTATE = "FG400"  # no token, a token below 1, or a resource the API would refuse
PREFIX = "fencegate_fence_"
MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1; SQLite has no limit, one rule keeps names portable
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SEGMENT = RESOURCE_CHARS  # the characters of a resource's segment
# a resource's segments in a regex PostgreSQL reads; the dot segments are refused beside it
SEGMENTS = rf"[{SEGMENT}]+(?:/[{SEGMENT}]+)*"


def _identifier(what: str, name: object) -> str:
    if not isinstance(name, str) or IDENTIFIER.fullmatch(name) is None or len(name) > MAX_IDENTIFIER:
        raise ConfigurationError(
            f"{what} {name!r} is not a plain SQL name: give letters, digits and _ (not starting with a "
            f"digit), at most {MAX_IDENTIFIER} characters, as the catalog holds it"
        )
    return name


def split_table(dialect: str, table: str) -> tuple[str | None, str]:
    """(schema or None, table) of `table`, each checked as a plain SQL name; SQLite takes no schema."""
    given: object = table  # annotations do not hold at run time
    if not isinstance(given, str):
        return None, _identifier("table", given)
    schema, dot, name = given.rpartition(".")
    if not dot:
        return None, _identifier("table", name)
    if dialect == "sqlite":
        raise ConfigurationError(f"table {table!r}: give the table's name alone, SQLite has no schemas")
    return _identifier("schema", schema), _identifier("table", name)


def object_name(table: str) -> str:
    """`fencegate_fence_<table>` (a schema-qualified table's dot as `_`), shortened with a digest to fit."""
    name = PREFIX + table.replace(".", "_")
    if len(name) <= MAX_IDENTIFIER:
        return name
    return f"{name[: MAX_IDENTIFIER - 9]}_{hashlib.sha256(table.encode()).hexdigest()[:8]}"


def _quoted(schema: str | None, name: str) -> str:
    return f'"{name}"' if schema is None else f'"{schema}"."{name}"'


def _checked(
    dialect: str, table: str, token_column: str, resource_column: str | None, resource: str | None
) -> tuple[str | None, str]:
    check_dialect(dialect)
    where = split_table(dialect, table)
    _identifier("token column", token_column)
    if (resource_column is None) == (resource is None):
        raise ConfigurationError(
            "name where each row's resource is: a resource column (resource_column=, --resource-column) "
            "or one resource for the whole table (resource=, --resource), exactly one of them"
        )
    if resource_column is not None:
        _identifier("resource column", resource_column)
    else:
        resource_header(resource)  # the gateway's rule; it also keeps quotes out of the SQL literal
    return where


def install_statements(
    dialect: str,
    *,
    table: str,
    token_column: str,
    resource_column: str | None = None,
    resource: str | None = None,
) -> list[str]:
    """The SQL that installs the marks table and the trigger on `table` (`fencegate sql install --print`).

    Each item is one statement; run them in order in one transaction. `ConfigurationError` for a name
    that is not a plain SQL name, or unless exactly one of `resource_column` and `resource` is given.
    """
    schema, name = _checked(dialect, table, token_column, resource_column, resource)
    full = name if schema is None else f"{schema}.{name}"
    build = _postgresql if dialect == "postgresql" else _sqlite
    version = (
        f"INSERT INTO {SCHEMA_TABLE} (component, version) "  # noqa: S608 - checked names only
        f"VALUES ('trigger:{full}', {SCHEMA_VERSION}) ON CONFLICT (component) DO NOTHING"
    )
    return [
        *marks_statements(dialect),
        *build(_quoted(schema, name), object_name(full), schema, token_column, resource_column, resource),
        version,
    ]


def uninstall_statements(dialect: str, *, table: str) -> list[str]:
    """The SQL that removes the trigger on `table` (`fencegate sql uninstall --print`).

    The marks table stays: the call and the other tables' triggers fence on it, and a mark dropped
    would let a stale token through the next install.
    """
    check_dialect(dialect)
    schema, name = split_table(dialect, table)
    full = name if schema is None else f"{schema}.{name}"
    owner = object_name(full)
    forget = f"DELETE FROM {SCHEMA_TABLE} WHERE component = 'trigger:{full}'"  # noqa: S608 - checked names
    if dialect == "postgresql":
        function = _quoted(schema, owner)
        return [
            f'DROP TRIGGER IF EXISTS "{owner}" ON {_quoted(schema, name)}',
            f"DROP FUNCTION IF EXISTS {function}()",
            forget,
        ]
    return [f'DROP TRIGGER IF EXISTS "{owner}_insert"', f'DROP TRIGGER IF EXISTS "{owner}_update"', forget]


def _postgresql(
    table: str, owner: str, schema: str | None, token: str, column: str | None, fixed: str | None
) -> list[str]:
    resource = f'NEW."{column}"' if column is not None else f"'{fixed}'"
    moved = (
        ""
        if column is None
        else f"""
  IF TG_OP = 'UPDATE' AND OLD."{column}" IS DISTINCT FROM NEW."{column}" THEN
    RAISE EXCEPTION 'fencegate: the row belongs to resource %, not %', OLD."{column}", NEW."{column}"
      USING ERRCODE = '{MOVED_SQLSTATE}';
  END IF;"""
    )
    function = _quoted(schema, owner)
    body = f"""
DECLARE
  fenced_resource text := {resource};
  fenced_token bigint := NEW."{token}";
  mark bigint;
BEGIN
  IF fenced_token IS NULL OR fenced_token < 1 THEN
    RAISE EXCEPTION 'fencegate: a write to % needs a token from 1 in "{token}", got %', TG_TABLE_NAME,
      coalesce(fenced_token::text, 'NULL') USING ERRCODE = '{BAD_INPUT_SQLSTATE}';
  END IF;
  IF fenced_resource IS NULL OR length(fenced_resource) > {MAX_RESOURCE_LENGTH}
      OR fenced_resource !~ '^{SEGMENTS}$' OR ('/' || fenced_resource || '/') ~ '/[.][.]?/' THEN
    RAISE EXCEPTION 'fencegate: % is not a resource name (segments of {SEGMENT.replace("%", "%%")} joined by '
      'single slashes, at most {MAX_RESOURCE_LENGTH} characters)',
      coalesce(quote_literal(fenced_resource), 'NULL')
      USING ERRCODE = '{BAD_INPUT_SQLSTATE}';
  END IF;{moved}
  INSERT INTO {MARKS_TABLE} AS held (resource, token) VALUES (fenced_resource, fenced_token)
    ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE held.token <= excluded.token
    RETURNING held.token INTO mark;
  IF NOT FOUND THEN
    SELECT held.token INTO mark FROM {MARKS_TABLE} AS held WHERE held.resource = fenced_resource;
    RAISE EXCEPTION 'fencegate: resource % token % is below the mark %: nothing was written',
      fenced_resource, fenced_token, mark USING ERRCODE = '{STALE_SQLSTATE}';
  END IF;
  RETURN NEW;
END
"""  # noqa: S608 - names checked as plain SQL names, the resource as the API's
    return [
        f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql "
        f"SET search_path FROM CURRENT AS $fencegate${body}$fencegate$",
        f'CREATE OR REPLACE TRIGGER "{owner}" BEFORE INSERT OR UPDATE ON {table} '
        f"FOR EACH ROW EXECUTE FUNCTION {function}()",
    ]


def _sqlite(
    table: str, owner: str, _schema: str | None, token: str, column: str | None, fixed: str | None
) -> list[str]:
    resource = f'NEW."{column}"' if column is not None else f"'{fixed}'"
    named = f" {fixed}" if fixed is not None else f" in {table}.{column}"
    checks = [
        f"SELECT RAISE(ABORT, 'fencegate_bad_token: a write to {table} needs an integer token from 1') "  # noqa: S608 - checked names
        f'WHERE typeof(NEW."{token}") <> \'integer\' OR NEW."{token}" < 1;',
    ]
    if column is not None:
        checks.append(
            f"SELECT RAISE(ABORT, 'fencegate_bad_resource: {table}.{column} is not a resource name') "
            f"WHERE typeof({resource}) <> 'text' "
            f"OR length({resource}) NOT BETWEEN 1 AND {MAX_RESOURCE_LENGTH} "
            f"OR {resource} GLOB '*[^/{SEGMENT}]*' OR ('/' || {resource} || '/') GLOB '*//*' "
            f"OR ('/' || {resource} || '/') GLOB '*/./*' OR ('/' || {resource} || '/') GLOB '*/../*';"
        )
    fence = [
        f"SELECT RAISE(ABORT, 'fencegate_stale_token: the token is below the mark of resource{named}: "  # noqa: S608 - checked names
        f"nothing was written to {table}') "
        f'FROM {MARKS_TABLE} WHERE resource = {resource} AND token > NEW."{token}";',
        f'INSERT INTO {MARKS_TABLE} (resource, token) VALUES ({resource}, NEW."{token}") '  # noqa: S608 - checked names
        "ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE token <= excluded.token;",
    ]
    moved = (
        []
        if column is None
        else [
            f"SELECT RAISE(ABORT, 'fencegate_resource_changed: a row of {table} belongs to the resource it "
            f'was written under\') WHERE OLD."{column}" IS NOT NEW."{column}";'
        ]
    )
    statements = []
    for event, extra in (("insert", []), ("update", moved)):
        body = "\n  ".join([*checks, *extra, *fence])
        statements.append(
            f'CREATE TRIGGER IF NOT EXISTS "{owner}_{event}" BEFORE {event.upper()} ON {table} '
            f"FOR EACH ROW BEGIN\n  {body}\nEND"
        )
    return statements
