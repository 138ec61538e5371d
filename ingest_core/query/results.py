"""A SQL result (`query.engine`) written in one of Druid's result formats, for the SQL API and `ingest query` alike:

    body = write_result(table, ResultFormat("objectLines", header=True, types_header=True))

Druid's formats (`resultFormat`): object, array, objectLines, arrayLines, csv, with the header rows Druid writes
(`header`, `typesHeader`, `sqlTypesHeader`); and `table`, `ingest query`'s aligned text for a terminal. Every
format writes the same values, JSON values as Druid writes them (`table_rows`, `json_value`, `json_object`).

Values JSON has no room for are written as Druid's Jackson writes them: a double that is NaN or infinite as the
strings "NaN", "Infinity", "-Infinity" (a bare NaN is no JSON); a timestamp or date beyond Python's years 1 to
9999 as ISO-8601 from its integer, years as Joda writes them ("10000-01-01T00:00:00.000Z", year 0 is 1 BC), and
DuckDB's 'infinity' / '-infinity' timestamps and dates as those strings (which DuckDB reads back).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.periods import format_datetime

FORMATS = ("object", "array", "objectLines", "arrayLines", "csv")  # Druid's resultFormat values
TABLE = "table"  # `ingest query`'s own: columns aligned for a terminal, and the row count
CONTENT_TYPES = {"object": "application/json", "array": "application/json", "objectLines": "text/plain",
                 "arrayLines": "text/plain", "csv": "text/csv"}


@dataclass(frozen=True)
class ResultFormat:
    """How a result is written: Druid's `resultFormat` and header flags, and the `sqlTimeZone` its timestamps are
    written in. `types_header` and `sql_types_header` add rows (or fields of the object header) only with
    `header`, as Druid's do."""

    name: str = "object"
    header: bool = False
    types_header: bool = False
    sql_types_header: bool = False
    time_zone: str = "UTC"

    def __post_init__(self) -> None:
        if self.name not in (*FORMATS, TABLE):
            raise ValueError(f"no result format {self.name!r}: one of {', '.join(FORMATS)}, {TABLE}")


def write_result(table: pa.Table, fmt: ResultFormat) -> str:
    """The body, in `fmt`, with the header rows it asks for. The line formats and csv end with an empty line, as
    Druid's do: a response without it was cut short."""
    if fmt.name == TABLE:
        return _aligned(table, fmt.time_zone)
    names = table.column_names
    types = [druid_types(f.type) for f in table.schema]
    rows = table_rows(table, fmt.time_zone)
    headers: list[list] = []
    if fmt.header:
        headers.append(list(names))
        if fmt.types_header:
            headers.append([t[0] for t in types])
        if fmt.sql_types_header:
            headers.append([t[1] for t in types])
    if fmt.name == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for line in [*headers, *rows]:
            writer.writerow([_text(v) for v in line])
        return out.getvalue() + "\n"
    if fmt.name in ("object", "objectLines"):  # each field written, a name given twice too (as Druid's writer does)
        header = [_object_header(types, fmt)] if fmt.header else []
        lines = [json_object(names, r) for r in header + rows]
    else:
        lines = [json.dumps(r, allow_nan=False) for r in headers + rows]
    if fmt.name in ("object", "array"):
        return "[" + ", ".join(lines) + "]"
    return "".join(line + "\n" for line in lines) + "\n"


def _object_header(types: list[tuple[str, str]], fmt: ResultFormat) -> list:
    """Druid's header object's values: each column null, or its {"type", "sqlType"} as asked."""
    def one(runtime: str, sql: str) -> dict | None:
        described = {**({"type": runtime} if fmt.types_header else {}),
                     **({"sqlType": sql} if fmt.sql_types_header else {})}
        return described or None

    return [one(*t) for t in types]


def druid_types(t: pa.DataType) -> tuple[str, str]:
    """An Arrow result column's type as Druid's typesHeader (runtime type) and sqlTypesHeader (SQL type)."""
    if pa.types.is_timestamp(t):
        return "LONG", "TIMESTAMP"
    if pa.types.is_date(t):
        return "LONG", "DATE"
    if pa.types.is_boolean(t):
        return "LONG", "BOOLEAN"
    if pa.types.is_integer(t):
        return "LONG", "BIGINT" if t.bit_width == 64 else "INTEGER"
    if pa.types.is_decimal(t):
        return ("LONG", "BIGINT") if t.scale == 0 else ("DOUBLE", "DECIMAL")
    if pa.types.is_float32(t):
        return "FLOAT", "FLOAT"
    if pa.types.is_floating(t):
        return "DOUBLE", "DOUBLE"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t):
        return "STRING", "VARCHAR"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"ARRAY<{druid_types(t.value_type)[0]}>", "ARRAY"
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return "COMPLEX<json>", "OTHER"
    return "COMPLEX", "OTHER"


def json_value(value: Any, zone: str = "UTC") -> Any:
    """A SQL value as JSON: timestamps as Druid writes them (ISO-8601, milliseconds; in UTC with a `Z`, or in
    `zone` with its offset, as Druid's sqlTimeZone), exact integers (DuckDB sums longs into 128-bit decimals),
    bytes in base64, non-finite doubles as Druid's strings."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            return value.isoformat()
        if zone == "UTC":
            return format_datetime(value)
        return value.astimezone(ZoneInfo(zone)).isoformat(timespec="milliseconds")
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: json_value(v, zone) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v, zone) for v in value]
    if isinstance(value, float) and not math.isfinite(value):  # JSON has none: Druid's (Jackson's) strings
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    return value


def table_rows(table: pa.Table, zone: str = "UTC") -> list[list]:
    """Each row's values as JSON values (`json_value`), in column order: a column name given twice keeps both
    columns (a row as a dict would keep the last)."""
    columns = [[json_value(v, zone) for v in _python_values(column, zone)] for column in table.columns]
    return [list(row) for row in zip(*columns)] if columns else [[] for _ in range(table.num_rows)]


def json_object(names: list[str], values: list) -> str:
    """A JSON object of these fields in order, each written even where a name repeats (as Druid's object writer
    does; a JSON parser keeps the last); JSON values only (`json_value`), so never a bare NaN."""
    return "{" + ", ".join(f"{json.dumps(n)}: {json.dumps(v, allow_nan=False)}" for n, v in zip(names, values)) + "}"


# beyond Python's dates and times: values Arrow cannot convert, formatted from their integers
_EPOCH_DAYS = 719468  # days from 0000-03-01 to 1970-01-01 (`_civil`)
_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}  # and "ns": divided by 1,000
_INFINITE = {2**63 - 1: "infinity", -(2**63 - 1): "-infinity", 2**31 - 1: "infinity", -(2**31 - 1): "-infinity"}
_FIRST, _LAST = datetime(1, 1, 2), datetime(9999, 12, 30)  # a day inside Python's years: a zone's offset there
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _python_values(column: pa.ChunkedArray, zone: str) -> list:
    """A column's values as Python's (Arrow's `to_pylist`); where a timestamp or date is beyond Python's range,
    those of that chunk from their integers (`_wide_values`)."""
    values: list = []
    for chunk in column.chunks:
        try:
            values += chunk.to_pylist()
        except (OverflowError, ValueError):
            values += _wide_values(chunk, zone)
    return values


def _wide_values(array: pa.Array, zone: str) -> list:
    t = array.type
    if pa.types.is_dictionary(t):
        return _wide_values(array.dictionary_decode(), zone)
    if pa.types.is_timestamp(t):
        return [None if v is None else _instant(v, t.unit, t.tz is not None, zone)
                for v in array.cast(pa.int64()).to_pylist()]
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        per_day = 1 if pa.types.is_date32(t) else 86_400_000
        return [None if v is None else _day(v, per_day) for v in array.view(
            pa.int32() if per_day == 1 else pa.int64()).to_pylist()]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        flat, rows, at = _wide_values(array.flatten(), zone), [], 0
        for n in pc.list_value_length(array).to_pylist():
            rows.append(None if n is None else flat[at:at + n])
            at += n or 0
        return rows
    if pa.types.is_struct(t):
        fields = [_wide_values(f, zone) for f in array.flatten()]
        names = [t.field(i).name for i in range(t.num_fields)]
        return [dict(zip(names, values)) if ok else None
                for ok, *values in zip(array.is_valid().to_pylist(), *fields)]
    return array.to_pylist()


def _instant(value: int, unit: str, aware: bool, zone: str) -> datetime | str:
    if value in _INFINITE:
        return _INFINITE[value]
    micros = value * _MICROS[unit] if unit != "ns" else value // 1000
    if -62135510400 * 10**6 <= micros <= 253402041600 * 10**6:  # 0001-01-02 to 9999-12-29: Python's own
        moment = _EPOCH + timedelta(microseconds=micros)
        return moment if aware else moment.replace(tzinfo=None)
    if not aware:
        seconds, micro = divmod(micros, 1_000_000)
        return _iso(seconds) + (f".{micro:06d}" if micro else "")
    if zone == "UTC":
        return _iso(micros // 1000 // 1000, micros // 1000 % 1000) + "Z"
    # past Python's years, a zone's offset is the one it has at the edge of them (its rules from then on)
    offset = ZoneInfo(zone).utcoffset(_LAST if micros > 0 else _FIRST)
    local = micros + int(offset.total_seconds()) * 1_000_000
    sign, minutes = ("-" if offset < timedelta(0) else "+"), abs(int(offset.total_seconds())) // 60
    return _iso(local // 1000 // 1000, local // 1000 % 1000) + f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def _day(value: int, per_day: int) -> date | str:
    if value in _INFINITE:
        return _INFINITE[value]
    days = value // per_day
    if -719161 <= days <= 2932895:  # 0001-01-02 to 9999-12-30
        return date(1970, 1, 1) + timedelta(days=days)
    return _iso(days * 86400, date_only=True)


def _iso(seconds: int, millis: int | None = None, date_only: bool = False) -> str:
    """ISO-8601 of `seconds` since 1970 (proleptic Gregorian, any year): the date, or the date and time (with
    `millis` if given)."""
    days, second = divmod(seconds, 86400)
    year, month, day = _civil(days)
    text = f"{'-' if year < 0 else ''}{abs(year):04d}-{month:02d}-{day:02d}"
    if date_only:
        return text
    text += f"T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}"
    return text if millis is None else f"{text}.{millis:03d}"


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01, for any year (H. Hinnant's civil_from_days)."""
    z = days + _EPOCH_DAYS
    era, doe = divmod(z, 146097)
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day, month = doy - (153 * mp + 2) // 5 + 1, mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _text(value: Any) -> str:
    """A JSON value (`json_value`) as a cell's text."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def _aligned(table: pa.Table, zone: str) -> str:
    """Columns padded to their widest value, a rule under the header, and the row count; timestamps in `zone`."""
    header = table.column_names
    cells = [[_text(v) for v in row] for row in table_rows(table, zone)]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()

    lines = [line(header), line(["-" * w for w in widths]), *(line(r) for r in cells)]
    lines.append(f"({len(cells)} row{'' if len(cells) == 1 else 's'})")
    return "\n".join(lines) + "\n"
