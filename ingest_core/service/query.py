"""`ingest query`: a SQL result (`store.sql`) as an aligned table, JSON or CSV."""

from __future__ import annotations

import base64
import csv
import io
import json
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa

from ingest_core.core.periods import format_datetime


def json_value(value: Any, zone: str = "UTC") -> Any:
    """A SQL value as JSON: timestamps as Druid writes them (ISO-8601, milliseconds; in UTC with a `Z`, or in
    `zone` with its offset, as Druid's sqlTimeZone), exact integers (DuckDB sums longs into 128-bit decimals),
    bytes in base64."""
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
    if isinstance(value, float) and value != value:  # NaN: JSON has none
        return None
    return value


def _text(value: Any, zone: str = "UTC") -> str:
    if value is None:
        return ""
    converted = json_value(value, zone)
    return converted if isinstance(converted, str) else json.dumps(converted)


def format_json(table: pa.Table, zone: str = "UTC") -> str:
    return json.dumps([{k: json_value(v, zone) for k, v in row.items()} for row in table.to_pylist()],
                      indent=2) + "\n"


def format_csv(table: pa.Table, zone: str = "UTC") -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.column_names)
    for row in table.to_pylist():
        writer.writerow([_text(v, zone) for v in row.values()])
    return out.getvalue()


def format_table(table: pa.Table, zone: str = "UTC") -> str:
    """Columns padded to their widest value, a rule under the header, and the row count; timestamps in `zone`."""
    header = table.column_names
    cells = [[_text(v, zone) for v in row.values()] for row in table.to_pylist()]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()

    lines = [line(header), line(["-" * w for w in widths]), *(line(r) for r in cells)]
    lines.append(f"({len(cells)} row{'' if len(cells) == 1 else 's'})")
    return "\n".join(lines) + "\n"
