"""`timestampSpec` formats: values from a record to epoch milliseconds (UTC), as Druid's TimestampParser.

  auto    ISO-8601 text, or a number (or numeric text) of milliseconds
  iso     ISO-8601 text; no offset means UTC
  posix   seconds; millis; micro; nano       (numbers or numeric text)
  ruby    seconds with a fraction
  other   a Joda-Time pattern such as `yyyy-MM-dd HH:mm:ss.SSS`, `dd/MMM/yyyy:HH:mm:ss Z`

Druid keeps millisecond precision, so finer digits are truncated.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Callable

from ingest_core.core.time_formats import joda_to_strptime

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _millis_of(dt: datetime) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    delta = dt - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def parse_iso(text: str) -> int:
    s = text.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    # fromisoformat takes at most 6 fraction digits; Druid keeps milliseconds anyway
    m = re.search(r"\.(\d{7,})", s)
    if m:
        s = s[:m.start(1)] + m.group(1)[:6] + s[m.end(1):]
    try:
        return _millis_of(datetime.fromisoformat(s))
    except ValueError as exc:
        # Joda's ISO parser (Druid's) reads one-digit fields too: 2022-6-14T1:02:03Z (Druid's nested-columns
        # example data has one)
        padded = _ONE_DIGIT_FIELD.sub(r"0\1", s)
        try:
            return _millis_of(datetime.fromisoformat(padded))
        except ValueError:
            raise exc from None


_ONE_DIGIT_FIELD = re.compile(r"(?<=\d[-T:])(\d)(?=$|[-T:.+Z]|-\d)")


def _number(value: Any) -> float | int:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a timestamp")
    if isinstance(value, (int, float)):
        return value
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        return float(text)


def _scaled(divisor: int, multiplier: int = 1) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        n = _number(value)
        if isinstance(n, int):
            return n * multiplier // divisor
        return int(n * multiplier / divisor)
    return parse


def _auto(value: Any) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    text = str(value).strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return parse_iso(text)


def _ruby(value: Any) -> int:
    return int(float(_number(value)) * 1000)


def timestamp_parser(fmt: str) -> Callable[[Any], int]:
    """A function from a raw value to epoch millis; raises ValueError/TypeError on values it cannot read."""
    kind = fmt.lower()
    if kind == "auto":
        return _auto
    if kind == "iso":
        return lambda v: parse_iso(str(v))
    if kind == "posix":
        return _scaled(1, 1000)
    if kind == "millis":
        return _scaled(1)
    if kind == "micro":
        return _scaled(1000)
    if kind == "nano":
        return _scaled(1_000_000)
    if kind == "ruby":
        return _ruby
    directive = joda_to_strptime(fmt)

    def parse_pattern(value: Any) -> int:
        return _millis_of(datetime.strptime(str(value).strip(), directive))
    return parse_pattern
