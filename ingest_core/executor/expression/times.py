"""Druid's time functions on the executors: timestamp, unix_timestamp, timestamp_floor/ceil/shift/extract/parse/
format, in Joda-Time's rules (time zones, origins, a repeated autumn hour keeping the instant's offset). Vectorized
on pyarrow where its time-zone rules agree with Joda's (UTC, and 1972-2036 in a zone with rules: `_modern`), per
value with `value_functions.PeriodBuckets` and Python's zoneinfo elsewhere; calendar arithmetic is `calendar`'s.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.granularity import Granularity
from ingest_core.core.periods import Period, parse_datetime
from ingest_core.core.time_formats import joda_to_strptime, joda_tokens, time_zone
from ingest_core.executor import buckets, value_functions
from ingest_core.executor.casts import is_arrow, is_text, to_long
from ingest_core.executor.expression.calendar import add_months
from ingest_core.executor.expression.numeric import div_longs
from ingest_core.executor.expression.vectors import as_text, broadcast, lift, longs, on_numpy, per_value, value_type
from ingest_core.executor.timestamps import parse_iso, timestamp_parser


def _zone(name: Any) -> Any:
    return time_zone(str(name)) if name is not None else None


def arrow_zone(zone: Any) -> str:
    """A zone as pyarrow names it: 'UTC', an IANA name, or '+05:30'."""
    key = getattr(zone, "key", None)
    if key:
        return key
    offset = zone.utcoffset(None)
    minutes = int(offset.total_seconds() // 60)
    return "UTC" if minutes == 0 else f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _millis_of_time_arg(t: Any) -> Any:
    """A time argument as epoch millis: numbers (and numeric text) as they are, other text read as ISO-8601,
    as Joda's DateTime(Object) does; text that is no time is an error."""
    if not is_text(value_type(t)):
        return to_long(t)

    def one(x: str) -> int:
        number = to_long(x)
        if number is not None:
            return number
        try:
            return parse_iso(x)
        except ValueError:
            raise ExpressionError(f"{x[:40]!r} is not a time") from None
    return per_value(one, pa.int64())(0 if not is_arrow(t) else len(t), t)


def timestamp(n: int, s: Any, fmt: str | None = None, *, seconds: bool = False) -> Any:
    """Druid's timestamp(): text parsed as ISO-8601 (or by the Joda-Time pattern); anything else, or text that
    does not parse, is an error (Druid throws)."""
    if not (is_text(value_type(s)) or pa.types.is_null(value_type(s))):
        raise ExpressionError(f"first argument should be a STRING but got {value_type(s)} instead")
    parse = timestamp_parser(str(fmt) if fmt is not None else "iso")

    def one(x: str) -> int:
        try:
            if fmt is None and re.match(r"\s*[-+]?\d+-\d\d-\d\d ", x):
                raise ValueError("Joda's dateOptionalTimeParser wants a 'T' before the time")
            millis = parse(x)
        except (ValueError, TypeError, OverflowError):
            raise ExpressionError(f"invalid value {x[:40]!r}") from None
        return int(millis / 1000) if seconds else millis  # Java's division truncates
    return per_value(one, pa.int64())(n, s)


def _buckets(period: str, origin: Any, zone_name: Any) -> Any:
    zone = _zone(zone_name) or value_functions.EPOCH.tzinfo
    if isinstance(origin, str) and origin:
        when = parse_datetime(origin)
        if not re.search(r"(Z|[+-]\d\d(:?\d\d)?)$", origin.strip()):  # no offset: wall time in the zone, as Joda
            when = when.replace(tzinfo=zone)
        origin = value_functions.to_millis(when)
    elif origin == "" or isinstance(origin, bool):
        origin = None
    return value_functions.PeriodBuckets(Period.parse(str(period)), None if origin is None else int(origin), zone)


def timestamp_floor(n: int, t: Any, period: str, origin: Any = None, zone: Any = None) -> Any:
    t = _millis_of_time_arg(t)
    tz = arrow_zone(_zone(zone)) if zone is not None else "UTC"
    if origin is None and tz != "UTC" and is_arrow(t) and _modern(t):
        floored = _floor_in_zone(t, str(period), tz)
        if floored is not None:
            return floored
    if origin is None and tz == "UTC":
        gran = Granularity(str(period), Period.parse(str(period)))
        if not is_arrow(t):
            return None if t is None else buckets.floor(gran, pa.array([t], pa.timestamp("ms", tz="UTC"))
                                                        ).cast(pa.int64())[0].as_py()
        ts = pc.cast(broadcast(t, n), pa.timestamp("ms", tz="UTC"))
        return pc.cast(pc.cast(buckets.floor(gran, ts), pa.timestamp("ms", tz="UTC")), pa.int64())
    return per_value(_buckets(period, origin, zone).floor, pa.int64())(n, t)


# wall-clock units pyarrow floors in a zone as Joda does (an hour's floor in the repeated hour of autumn keeps
# the instant's own offset in Joda, pyarrow takes the earlier: those are left to PeriodBuckets)
_ZONE_UNITS = {"years": "year", "months": "month", "weeks": "week", "days": "day"}


def _floor_in_zone(t: Any, period: str, tz: str) -> Any:
    """A one-unit period floored in a time zone's wall time by pyarrow (None when pyarrow cannot: a multiple,
    or a wall time in a daylight-saving gap; the per-value PeriodBuckets does those)."""
    fields = value_functions.PeriodBuckets._fields(Period.parse(period))
    if len(fields) != 1 or fields[0][1] != 1 or fields[0][0] not in _ZONE_UNITS or Period.parse(period).negative:
        return None
    ts = pc.cast(pc.cast(t, pa.timestamp("ms", tz="UTC")), pa.timestamp("ms", tz=tz))
    try:
        floored = pc.floor_temporal(ts, 1, _ZONE_UNITS[fields[0][0]], week_starts_monday=True)
    except pa.ArrowInvalid:
        return None
    return pc.cast(pc.cast(floored, pa.timestamp("ms", tz="UTC")), pa.int64())


def timestamp_ceil(n: int, t: Any, period: str, origin: Any = None, zone: Any = None) -> Any:
    t = _millis_of_time_arg(t)
    buckets_ = _buckets(period, origin, zone)
    if origin is None and arrow_zone(buckets_.zone) == "UTC" and is_arrow(t) and buckets_.single is not None:
        # vectorized: the bucket start, and when the time is past it the next bucket's start, found by flooring
        # a time surely inside the next bucket (a month is at most 31 days, a year 366)
        start = timestamp_floor(n, t, period)
        field, count = buckets_.single
        ahead = {"years": 366 * 86_400_000, "months": 31 * 86_400_000}.get(field)
        following = timestamp_floor(n, pc.add(start, count * ahead), period) if ahead else \
            pc.add(start, count * value_functions._FIXED_MS[field])
        return pc.if_else(pc.equal(start, t), t, following)
    return per_value(buckets_.ceil, pa.int64())(n, t)


def timestamp_shift(n: int, t: Any, period: str, step: Any, zone: Any = None) -> Any:
    shifts = _buckets(period, None, zone)
    t, steps = _millis_of_time_arg(t), longs(step)[0]
    fields = dict(value_functions.PeriodBuckets._fields(shifts.period))
    sign = -1 if shifts.period.negative else 1
    fixed_offset = shifts.zone.utcoffset(None)  # None for a zone with rules (daylight saving)
    elapsed = not ({"years", "months"} & fields.keys()) and (
        fixed_offset is not None or not ({"weeks", "days"} & fields.keys()))
    if elapsed and (is_arrow(t) or is_arrow(steps)):  # no calendar field: a fixed number of milliseconds
        length = sign * sum(value_functions._FIXED_MS[f] * k for f, k in fields.items())
        return lift(pc.add_checked)(t, lift(pc.multiply_checked)(steps, length))
    if fixed_offset is not None and (is_arrow(t) or is_arrow(steps)):
        offset = int(fixed_offset.total_seconds() * 1000)

        def shift(millis: Any, k: Any) -> Any:  # in the zone's wall time, field by field as Joda adds them
            months = np.abs(np.asarray(k, dtype=np.float64)) * (fields.get("years", 0) * 12 + fields.get("months", 0))
            if np.any(months > 120_000):  # past 10,000 years: no date here holds it (numpy would wrap)
                raise ExpressionError("the shift leaves the range of dates")
            wall = millis + offset
            for field in ("years", "months"):
                if fields.get(field):
                    wall = add_months(wall, k * sign * fields[field] * (12 if field == "years" else 1))
            rest = sum(value_functions._FIXED_MS[f] * c for f, c in fields.items() if f not in ("years", "months"))
            return wall + k * sign * rest - offset
        return on_numpy(shift, [t, steps], n, pa.int64())
    return per_value(lambda x, k: shifts.shift(x, int(k)), pa.int64())(n, t, steps)


_TIME_UNITS = {"SECOND": pc.second, "MINUTE": pc.minute, "HOUR": pc.hour, "DAY": pc.day,
               "DOW": lambda t: pc.add(pc.day_of_week(t), 1), "ISODOW": lambda t: pc.add(pc.day_of_week(t), 1),
               "DOY": pc.day_of_year, "WEEK": pc.iso_week, "MONTH": pc.month, "QUARTER": pc.quarter,
               "YEAR": pc.year, "ISOYEAR": pc.iso_year, "MILLISECOND": pc.millisecond}


def timestamp_extract(n: int, t: Any, unit: str, zone: Any = None) -> Any:
    u = str(unit).upper()
    millis = _millis_of_time_arg(t)
    if u in ("EPOCH", "MICROSECOND"):  # Druid's MICROSECOND is epoch seconds / 1000 (sic)
        seconds = on_numpy(lambda m: div_longs(m, np.int64(1000)), [millis], n, pa.int64())
        return seconds if u == "EPOCH" else on_numpy(lambda m: div_longs(m, np.int64(1000)), [seconds], n, pa.int64())
    tz = arrow_zone(_zone(zone)) if zone is not None else "UTC"
    ts = pc.cast(pc.cast(broadcast(millis, n), pa.timestamp("ms", tz="UTC")), pa.timestamp("ms", tz=tz))
    if u in _TIME_UNITS:
        out = pc.cast(_TIME_UNITS[u](ts), pa.int64())
    else:
        year = pc.cast(pc.year(ts), pa.float64())
        if u == "DECADE":
            out = pc.cast(pc.trunc(pc.divide(year, 10.0)), pa.int64())
        else:
            out = pc.ceil(pc.divide(year, 100.0 if u == "CENTURY" else 1000.0))  # a double, as Druid's
    return out if is_arrow(millis) else out[0].as_py()


def timestamp_parse(n: int, s: Any, pattern: Any = None, zone: Any = None) -> Any:
    """Text to epoch millis: ISO-8601 or SQL ('2026-01-02 03:04:05') without a pattern; the zone for text
    without an offset; null for text that does not parse (Druid's timestamp_parse)."""
    tz = _zone(zone) or value_functions.EPOCH.tzinfo
    directive = joda_to_strptime(str(pattern)) if pattern is not None else None
    s = as_text(s)
    if directive is None and is_arrow(s):
        parsed = _parse_iso_vectorized(s, tz)
        if parsed is not None:
            return parsed

    def one(x: Any) -> int | None:
        text = value_functions.java_text(x)
        try:
            if directive is None:
                if not re.match(r"^[-+]?\d{4}", text):
                    return None
                if re.fullmatch(r"\d{4}(-\d\d)?", text):  # Joda reads a year, or a year and month, alone
                    text += "-01" * (2 - text.count("-"))
                text = re.sub(r"[zZ]$", "+00:00", text)
                text = re.sub(r"(\.\d{6})\d+", r"\1", text)
                when = datetime.fromisoformat(text)
            else:
                when = datetime.strptime(text, directive)
        except (ValueError, OverflowError):
            return None
        if when.tzinfo is None:
            wall, when = when, when.replace(tzinfo=tz)
            if value_functions.local(value_functions.to_millis(when), tz).replace(tzinfo=None) != wall:
                return None  # a wall time daylight saving skips: Joda's parser refuses it
        return value_functions.to_millis(when)
    return per_value(one, pa.int64())(n, s)


def _parse_iso_vectorized(s: Any, zone: Any) -> Any:
    """timestamp_parse's default on pyarrow: when every text is an ISO-8601 or SQL time pyarrow reads (all with
    an offset, or none), in 1972-2036 for a zone with rules; None when the per-value path must decide."""
    s = s.combine_chunks() if isinstance(s, pa.ChunkedArray) else s
    try:
        naive = pc.cast(s, pa.timestamp("ms"))
    except pa.ArrowInvalid:
        try:  # every text carries its own offset
            return pc.cast(pc.cast(s, pa.timestamp("ms", tz="UTC")), pa.int64())
        except pa.ArrowInvalid:
            return None
    name = arrow_zone(zone)
    if name == "UTC":
        return pc.cast(naive, pa.int64())
    if not _modern(pc.cast(naive, pa.int64())):
        return None
    try:  # a repeated wall time is the earlier instant, as Joda's; one in a gap goes to the per-value path
        aware = pc.assume_timezone(naive, name, ambiguous="earliest", nonexistent="raise")
    except pa.ArrowInvalid:
        return None
    return pc.cast(pc.cast(aware, pa.timestamp("ms", tz="UTC")), pa.int64())


def timestamp_format(n: int, t: Any, pattern: Any = None, zone: Any = None) -> Any:
    tz = _zone(zone) or value_functions.EPOCH.tzinfo
    millis = to_long(t)
    tokens = _ISO_TOKENS if pattern is None else joda_tokens(str(pattern))
    if is_arrow(millis) and _modern(millis) and not any(letter == "z" for letter, _ in tokens):  # PST/PDT
        return _print_vectorized(tokens, millis, tz, iso=pattern is None)
    printer = value_functions.joda_printer(None if pattern is None else str(pattern), tz)
    return per_value(printer, pa.string())(n, millis)


def _modern(millis: Any) -> bool:
    """Whether every time is from 1972 to 2036, where pyarrow's time-zone rules agree with Python's (and
    Joda's): past 2037 pyarrow stops applying daylight saving, and older offsets differ between databases."""
    low, high = pc.min_max(millis).values()
    return low.as_py() is None or (63_072_000_000 <= low.as_py() and high.as_py() < 2_114_380_800_000)


_ISO_TOKENS = joda_tokens("yyyy-MM-dd'T'HH:mm:ss.SSSZZ")
# tuples, made arrays where used: pa.array() at import would load pandas (pyarrow looks for it), about 0.3 s of
# CPU in every Python worker that only plans a read (Spark's data-source planners)
_DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH_NAMES = ("", "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
                "November", "December")


def _print_vectorized(tokens: list[tuple[str, Any]], millis: Any, zone: Any, iso: bool) -> Any:
    """Joda-Time printing on a column: the wall-clock fields in the zone by pyarrow, joined as text (the same
    text as `value_functions.joda_printer`, which the tests compare it with)."""
    utc = pc.cast(millis, pa.timestamp("ms", tz="UTC"))
    ts = pc.cast(utc, pa.timestamp("ms", tz=arrow_zone(zone)))
    offset_minutes = pc.divide(pc.subtract(pc.cast(pc.local_timestamp(ts), pa.int64()), pc.cast(millis, pa.int64())),
                               60_000)

    def num(values: Any, width: int) -> Any:
        text = pc.cast(pc.cast(values, pa.int64()), pa.string())
        return pc.utf8_lpad(text, width, "0") if width > 1 else text

    def offset(colon: bool, zero: str | None) -> Any:
        sign = pc.if_else(pc.less(offset_minutes, 0), "-", "+")
        magnitude = pc.abs(offset_minutes)
        hours, minutes = pc.divide(magnitude, 60), pc.subtract(magnitude, pc.multiply(pc.divide(magnitude, 60), 60))
        text = pc.binary_join_element_wise(pc.binary_join_element_wise(sign, num(hours, 2), ""), num(minutes, 2),
                                           ":" if colon else "")
        return pc.if_else(pc.equal(offset_minutes, 0), zero, text) if zero else text

    pieces: list[Any] = []
    for letter, count in tokens:
        if not letter:
            pieces.append(str(count))
            continue
        k = int(count)
        if letter in "yYx":
            year = pc.iso_year(ts) if letter == "x" else pc.year(ts)
            pieces.append(num(pc.subtract(year, pc.multiply(pc.divide(year, 100), 100)), 2) if k == 2 else num(year, k))
        elif letter == "G":
            pieces.append("AD")
        elif letter == "C":
            pieces.append(num(pc.divide(pc.year(ts), 100), k))
        elif letter == "w":
            pieces.append(num(pc.iso_week(ts), k))
        elif letter == "e":
            pieces.append(num(pc.add(pc.day_of_week(ts), 1), k))
        elif letter == "E":
            names = pc.take(pa.array(_DAY_NAMES), pc.day_of_week(ts))
            pieces.append(names if k >= 4 else pc.utf8_slice_codeunits(names, 0, 3))
        elif letter == "D":
            pieces.append(num(pc.day_of_year(ts), k))
        elif letter == "M":
            if k >= 3:
                names = pc.take(pa.array(_MONTH_NAMES), pc.month(ts))
                pieces.append(names if k >= 4 else pc.utf8_slice_codeunits(names, 0, 3))
            else:
                pieces.append(num(pc.month(ts), k))
        elif letter == "d":
            pieces.append(num(pc.day(ts), k))
        elif letter == "a":
            pieces.append(pc.if_else(pc.less(pc.hour(ts), 12), "AM", "PM"))
        elif letter in "KhHk":
            hour = pc.hour(ts)
            twelve = pc.subtract(hour, pc.multiply(pc.divide(hour, 12), 12))
            value = {"K": twelve, "h": pc.if_else(pc.equal(twelve, 0), 12, twelve), "H": hour,
                     "k": pc.if_else(pc.equal(hour, 0), 24, hour)}[letter]
            pieces.append(num(value, k))
        elif letter == "m":
            pieces.append(num(pc.minute(ts), k))
        elif letter == "s":
            pieces.append(num(pc.second(ts), k))
        elif letter == "S":
            fraction = num(pc.millisecond(ts), 3)
            pieces.append(pc.utf8_slice_codeunits(fraction, 0, k) if k <= 3 else pc.utf8_rpad(fraction, k, "0"))
        elif letter == "Z":
            if k >= 3:
                pieces.append(getattr(zone, "key", None) or value_functions.joda_printer("ZZZ", zone)(0))
            else:
                pieces.append(offset(colon=k == 2, zero="Z" if iso else None))
    return pc.binary_join_element_wise(*pieces, "")


# the registry's implementations (core.expression.functions names them "times.<name>")


def unix_timestamp(n: int, s: Any, fmt: Any = None) -> Any:
    return timestamp(n, s, fmt, seconds=True)
