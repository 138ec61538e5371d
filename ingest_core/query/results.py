"""`ingest query`: a SQL result (`query.engine`) as an aligned table, JSON or CSV; and the values of a result as
JSON values, as Druid writes them (`table_rows`, `json_value`, `json_object`), which the SQL API's result
formats (`service.sql_api`) write too.

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

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.periods import format_datetime


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


def format_json(table: pa.Table, zone: str = "UTC") -> str:
    """A JSON array of one object a row, a row a line; a column name given twice is written twice."""
    rows = [json_object(table.column_names, row) for row in table_rows(table, zone)]
    return "[" + ",".join(f"\n  {row}" for row in rows) + ("\n" if rows else "") + "]\n"


def format_csv(table: pa.Table, zone: str = "UTC") -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.column_names)
    for row in table_rows(table, zone):
        writer.writerow([_text(v) for v in row])
    return out.getvalue()


def format_table(table: pa.Table, zone: str = "UTC") -> str:
    """Columns padded to their widest value, a rule under the header, and the row count; timestamps in `zone`."""
    header = table.column_names
    cells = [[_text(v) for v in row] for row in table_rows(table, zone)]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()

    lines = [line(header), line(["-" * w for w in widths]), *(line(r) for r in cells)]
    lines.append(f"({len(cells)} row{'' if len(cells) == 1 else 's'})")
    return "\n".join(lines) + "\n"
