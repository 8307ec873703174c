"""Stored rows read as they are, each value checked against its column before anything uses it.

A hostile edit can leave a value in a table that fencegate never writes.
SQLite keeps any value in any column: text in an integer column, a blob in
a text column, an integer past 2**63 (stored as a float), a time in another
form than SQLAlchemy writes, or none at all. PostgreSQL enforces the types
but holds times Python cannot (before year 1, after 9999, `infinity`), and
the driver fails the whole read on one. A reader that must name such a row
rather than fail on it (`audit verify`) selects a `Decoder`'s `stored`
columns (no type processing; a time out of Python's range as text beside
it) and calls the decoder on each row for its values: it raises
`MalformedRow` naming the first column that holds what fencegate never
writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Column, ColumnElement, DateTime, Dialect, Text, case, cast, literal_column, type_coerce
from sqlalchemy.sql.sqltypes import NullType

from storage.errors import MalformedRow
from storage.models import Base

_Processor = Callable[[Any], Any]

# The times Python holds; PostgreSQL's range is wider (4713 BC to 294276 AD, and infinity). Written as
# SQL: asyncpg cannot send the first as a parameter either.
_STAMP = DateTime(timezone=True)
_EARLIEST: ColumnElement[datetime] = literal_column("TIMESTAMPTZ '0001-01-01 00:00:00+00'", _STAMP)
_LATEST: ColumnElement[datetime] = literal_column("TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'", _STAMP)
_SHOWN = 40  # characters of a malformed value quoted in a message
_KINDS = {int: "an integer", str: "text", datetime: "a time", bytes: "bytes", bool: "a boolean"}


def _beyond(key: str) -> str:
    return f"{key} (beyond Python's times)"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} characters)"


class Decoder:
    """Reads columns of `model` as stored: select `.stored`, and call it on each row for its values.

    The call raises `MalformedRow` naming the first column whose value fencegate never writes.
    """

    def __init__(self, model: type[Base], names: Sequence[str], dialect: Dialect) -> None:
        table = Base.metadata.tables[model.__tablename__]
        self._columns: list[tuple[Column[Any], type, _Processor | None, _Processor | None]] = []
        self.stored: list[ColumnElement[Any]] = []  # the columns without their type's processing
        for name in names:
            column = table.c[name]
            impl = column.type.dialect_impl(dialect)
            load, dump = impl.result_processor(dialect, None), impl.bind_processor(dialect)
            self._columns.append((column, column.type.python_type, load, dump))
            if dialect.name == "postgresql" and isinstance(column.type, DateTime):
                held = column.between(_EARLIEST, _LATEST)  # the driver fails the whole read on any other
                self.stored.append(case((held, column)).label(name))
                self.stored.append(case((~held, cast(column, Text))).label(_beyond(name)))
            else:
                self.stored.append(type_coerce(column, NullType()).label(name))

    def __call__(self, row: Mapping[Any, Any]) -> dict[str, Any]:
        return {
            column.key: self._value(column, kind, load, dump, row)
            for column, kind, load, dump in self._columns
        }

    @staticmethod
    def _value(
        column: Column[Any],
        kind: type,
        load: _Processor | None,
        dump: _Processor | None,
        row: Mapping[Any, Any],
    ) -> Any:
        raw = row[column.key]
        if raw is None:
            beyond = row.get(_beyond(column.key))
            if beyond is not None:
                raise MalformedRow(
                    f"{column.key} holds {_shown(beyond)}, beyond the times fencegate writes",
                    column=column.key,
                )
            if not column.nullable:
                raise MalformedRow(f"{column.key} holds nothing (NULL)", column=column.key)
            return None
        value = raw
        if load is not None:  # SQLite keeps times as text
            try:
                value = load(raw)
            except (TypeError, ValueError, OverflowError):
                value = None
        # bool is an int to Python, never to a column of integers
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise MalformedRow(
                f"{column.key} holds {_shown(raw)}, not {_KINDS.get(kind, kind.__name__)}", column=column.key
            )
        if dump is not None and dump(value) != raw:  # what SQLite's parser would forgive: another form
            raise MalformedRow(
                f"{column.key} holds {_shown(raw)}, not a time as fencegate writes one ({dump(value)!r})",
                column=column.key,
            )
        return value
