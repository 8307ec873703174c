"""Stored rows read as they are, each value checked against its column before anything uses it.

A hostile edit can leave a value in a table that fencegate never writes.
SQLite keeps any value in any column: text in an integer column, a blob in
a text column, an integer past 2**63 (stored as a float), a time in another
form than SQLAlchemy writes, text that is not UTF-8, or none at all.
PostgreSQL enforces the types but holds times Python cannot (before year 1,
after 9999, `infinity`). On either, the driver fails the whole read on a
value it cannot convert (text that is not UTF-8, such a time). A reader that
must name such a row rather than fail on it (`audit verify`, the migration
that chains an old trail) selects a `Decoder`'s `stored` columns (no type
processing; on SQLite text as its bytes, and which columns hold a blob
beside them; on PostgreSQL a time out of Python's range as text beside it) and
calls the decoder on each row for its values: it raises `MalformedRow`
naming the first column that holds what fencegate never writes.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    DateTime,
    Dialect,
    LargeBinary,
    Text,
    case,
    cast,
    func,
    literal_column,
    type_coerce,
)
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
_BLOBS = "(columns holding a blob)"  # SQLite: one bit per column, in the order given


def _beyond(key: str) -> str:
    return f"{key} (beyond Python's times)"


def _as_stored(column: Column[Any]) -> ColumnElement[Any]:
    """SQLite: the column's text as its bytes (the driver fails the whole read on text that is not
    UTF-8, in any column: SQLite keeps it even in an integer one), any other value as it is."""
    text = func.typeof(column) == literal_column("'text'")
    return type_coerce(case((text, cast(column, LargeBinary)), else_=column), NullType())


def _blobs(columns: Sequence[Column[Any]]) -> ColumnElement[Any]:
    """SQLite: which of `columns` hold a blob, as bits: their bytes are not text. One integer per row
    (0 but in an edited one): a `typeof` beside each column made `audit verify` half as slow again."""
    bits = [
        case((func.typeof(column) == literal_column("'blob'"), literal_column(str(1 << n))), else_=0)
        for n, column in enumerate(columns)
    ]
    return type_coerce(functools.reduce(operator.add, bits), NullType()).label(_BLOBS)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} characters)"


@dataclass(frozen=True, slots=True)
class _Column:
    column: Column[Any]
    key: str
    kind: type
    load: _Processor | None  # the type's result processing (SQLite keeps times as text)
    dump: _Processor | None  # and its bind processing: what fencegate writes for a value
    text_bit: int  # SQLite: this column's bit in `_BLOBS`, its bytes are text unless set; 0 elsewhere


class Decoder:
    """Reads columns of `model` as stored: select `.stored`, and call it on each row for its values.

    The call raises `MalformedRow` naming the first column whose value fencegate never writes.
    """

    def __init__(self, model: type[Base], names: Sequence[str], dialect: Dialect) -> None:
        table = Base.metadata.tables[model.__tablename__]
        sqlite = dialect.name == "sqlite"
        self._columns: list[_Column] = []
        self.stored: list[ColumnElement[Any]] = []  # the columns without their type's processing
        for n, name in enumerate(names):
            column = table.c[name]
            impl = column.type.dialect_impl(dialect)
            load, dump = impl.result_processor(dialect, None), impl.bind_processor(dialect)
            self._columns.append(_Column(column, name, column.type.python_type, load, dump, sqlite << n))
            if sqlite:
                self.stored.append(_as_stored(column).label(name))
            elif dialect.name == "postgresql" and isinstance(column.type, DateTime):
                held = column.between(_EARLIEST, _LATEST)  # the driver fails the whole read on any other
                self.stored.append(case((held, column)).label(name))
                self.stored.append(case((~held, cast(column, Text))).label(_beyond(name)))
            else:
                self.stored.append(type_coerce(column, NullType()).label(name))
        if sqlite:
            self.stored.append(_blobs([table.c[name] for name in names]))

    def __call__(self, row: Mapping[Any, Any]) -> dict[str, Any]:
        blobs = row.get(_BLOBS, 0)
        return {column.key: self._value(column, row, blobs) for column in self._columns}

    def get(self, row: Mapping[Any, Any], name: str) -> Any:
        """The value of column `name`, or None if it is malformed: what a reader goes on from."""
        column = next(column for column in self._columns if column.key == name)
        try:
            return self._value(column, row, row.get(_BLOBS, 0))
        except MalformedRow:
            return None

    @staticmethod
    def _value(column: _Column, row: Mapping[Any, Any], blobs: int) -> Any:
        key = column.key
        raw = row[key]
        if raw is None:
            beyond = row.get(_beyond(key))
            if beyond is not None:
                raise MalformedRow(
                    f"{key} holds {_shown(beyond)}, beyond the times fencegate writes", column=key
                )
            if not column.column.nullable:
                raise MalformedRow(f"{key} holds nothing (NULL)", column=key)
            return None
        bit = column.text_bit
        if bit and type(raw) is bytes and not blobs & bit:  # SQLite's text, as its bytes
            try:
                raw = raw.decode()
            except UnicodeDecodeError:
                raise MalformedRow(f"{key} holds {_shown(raw)}, text that is not UTF-8", column=key) from None
        value = raw
        load, kind = column.load, column.kind
        if load is not None:  # SQLite keeps times as text
            try:
                value = load(raw)
            except (TypeError, ValueError, OverflowError):
                value = None
        # bool is an int to Python, never to a column of integers
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise MalformedRow(
                f"{key} holds {_shown(raw)}, not {_KINDS.get(kind, kind.__name__)}", column=key
            )
        dump = column.dump
        if dump is not None and dump(value) != raw:  # what SQLite's parser would forgive: another form
            raise MalformedRow(
                f"{key} holds {_shown(raw)}, not a time as fencegate writes one ({dump(value)!r})", column=key
            )
        return value
