"""Druid SQL's time functions rewritten for DuckDB (TIME_FLOOR, TIME_CEIL, TIME_SHIFT, TIME_EXTRACT, TIME_FORMAT,
TIME_PARSE, TIME_IN_INTERVAL, FLOOR/CEIL(.. TO ..), TIMESTAMPADD/DIFF, MILLIS_TO_TIMESTAMP, TIMESTAMP_TO_MILLIS):
Druid's time zone and origin rules, through DuckDB's own functions and the `druid_*` macros below."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from sqlglot import exp

from ingest_core.core.periods import Period, PeriodError, format_datetime, parse_datetime
from ingest_core.core.time_formats import joda_parse_tokens
from ingest_core.query.arguments import Rewrite, arity, call, instant, sql_number, sql_string, string_arg
from ingest_core.query.errors import DruidSqlError

UTC = "UTC"
_OFFSET = re.compile(r"^[+-]\d{1,2}(:?\d{2})?$")


def _zone(fn: str, arg: exp.Expression | None, session: str) -> str:
    """Druid's time zone argument: a zone name, or an offset such as '-08:00' (ICU's 'GMT-08:00'); the query's
    sqlTimeZone when not given."""
    zone = string_arg(fn, arg, "time zone", session)
    return f"GMT{zone}" if _OFFSET.match(zone) else zone


def _period(fn: str, arg: exp.Expression | None) -> Period:
    text = string_arg(fn, arg, "period")
    if text is None:
        raise DruidSqlError(f"{fn}: the period is missing (an ISO-8601 period such as 'PT1H')")
    try:
        period = Period.parse(text)
    except PeriodError as exc:
        raise DruidSqlError(f"{fn}: {exc}") from None
    if period.negative or period.is_zero:
        raise DruidSqlError(f"{fn}: the period must be positive, not {text!r}")
    return period


def _interval(fn: str, period: Period) -> str:
    """A period as DuckDB interval text. DuckDB cannot bucket by months and days at once (nor Druid's compound
    calendar periods, whose buckets are not one length)."""
    months = period.years * 12 + period.months
    seconds = ((period.weeks * 7 + period.days) * 24 + period.hours) * 3600 + period.minutes * 60 + period.seconds
    if months and seconds:
        raise DruidSqlError(f"{fn}: a period of both months and days or times ({period}) is not supported here")
    return f"{months} months" if months else f"{seconds} seconds"


_UNITS = [("years", "year"), ("months", "month"), ("weeks", "week"), ("days", "day"), ("hours", "hour"),
          ("minutes", "minute"), ("seconds", "second")]


def _single_unit(period: Period) -> str | None:
    """The calendar unit of a period of one unit (P1D, PT1H, P1W): Druid floors those to the unit's start."""
    set_fields = [(f, u) for f, u in _UNITS if getattr(period, f)]
    if len(set_fields) == 1 and getattr(period, set_fields[0][0]) == 1:
        return set_fields[0][1]
    return None  # P3M: buckets of 3 months from the origin (1970-01): the calendar quarters


def _native(zone: str, session: str) -> bool:
    """Whether DuckDB's own functions on a TIMESTAMPTZ already work in `zone`: in UTC when the session is UTC
    (no conversion per row); otherwise the rewrites work on wall-clock time in the zone, as Druid's do."""
    return zone == UTC == session


def _local(ts: exp.Expression, zone: str, session: str) -> exp.Expression:
    """The wall-clock time in `zone` of a Druid timestamp (a DuckDB TIMESTAMP), or the TIMESTAMPTZ itself."""
    return instant(ts) if _native(zone, session) else call("timezone", sql_string(zone), instant(ts))


def _from_local(local: exp.Expression, zone: str, session: str) -> exp.Expression:
    return local if _native(zone, session) else call("timezone", sql_string(zone), local)


def _floor(fn: str, ts: exp.Expression, period: Period, origin: exp.Expression | None, zone: str,
           session: str) -> exp.Expression:
    """Druid's PeriodGranularity: a one-unit period without origin floors to the unit in the zone (weeks start
    Monday); otherwise buckets of the period counted from the origin (default 1970-01-01T00:00 in the zone)."""
    unit = _single_unit(period)
    if unit is not None and (origin is None or isinstance(origin, exp.Null)):
        return _from_local(call("date_trunc", sql_string(unit), _local(ts, zone, session)), zone, session)
    step = exp.Cast(this=sql_string(_interval(fn, period)), to=exp.DataType.build("INTERVAL"))
    if origin is None or isinstance(origin, exp.Null):
        local_origin = (instant(sql_string("1970-01-01 00:00:00+00")) if _native(zone, session) else
                        exp.Cast(this=sql_string("1970-01-01 00:00:00"), to=exp.DataType.build("TIMESTAMP")))
    else:
        local_origin = _local(origin, zone, session)
    return _from_local(call("time_bucket", step, _local(ts, zone, session), local_origin), zone, session)


def _time_floor(fn: str, args: list, session: str) -> exp.Expression:
    arity(fn, args, 2, 4)
    ts, period, origin, zone = (args + [None, None])[:4]
    return _floor(fn, ts, _period(fn, period), origin, _zone(fn, zone, session), session)


def _time_ceil(fn: str, args: list, session: str) -> exp.Expression:
    arity(fn, args, 2, 4)
    ts, period_arg, origin, zone_arg = (args + [None, None])[:4]
    period, zone = _period(fn, period_arg), _zone(fn, zone_arg, session)
    floor = _floor(fn, ts, period, origin, zone, session)
    return call("druid_ceil", instant(ts.copy()), floor, sql_string(_shift_interval(period)), sql_string(zone))


def _shift_interval(period: Period) -> str:
    """A period as DuckDB interval text, calendar fields kept (P1M is a month, P1D a calendar day in the zone)."""
    parts = [f"{getattr(period, f)} {u}s" for f, u in _UNITS if getattr(period, f)]
    return " ".join(parts) or "0 seconds"


def _time_shift(fn: str, args: list, session: str) -> exp.Expression:
    arity(fn, args, 3, 4)
    ts, period, step, zone = (args + [None])[:4]
    return call("druid_shift", instant(ts), sql_string(_shift_interval(_period(fn, period))), step,
                 sql_string(_zone(fn, zone, session)))


# Druid's TIME_EXTRACT / EXTRACT units (Joda fields) as DuckDB date parts
_EXTRACT = {"SECOND": "second", "MINUTE": "minute", "HOUR": "hour", "DAY": "day", "DOW": "isodow",
            "ISODOW": "isodow", "DOY": "doy", "WEEK": "week", "MONTH": "month", "QUARTER": "quarter",
            "YEAR": "year", "ISOYEAR": "isoyear", "DECADE": "decade", "CENTURY": "century",
            "MILLENNIUM": "millennium"}


def _time_extract(fn: str, args: list, session: str) -> exp.Expression:
    arity(fn, args, 2, 3)
    ts, unit_arg, zone_arg = (args + [None])[:3]
    unit = (string_arg(fn, unit_arg, "unit") or "").upper()
    zone = _zone(fn, zone_arg, session)
    if unit == "EPOCH":
        return exp.IntDiv(this=call("epoch_ms", instant(ts)), expression=sql_number(1000))
    if unit in ("MILLISECOND", "MICROSECOND"):
        part, scale = ("millisecond", 1000) if unit == "MILLISECOND" else ("microsecond", 1_000_000)
        return exp.Mod(this=call("date_part", sql_string(part), _local(ts, zone, session)),
                       expression=sql_number(scale))
    if unit not in _EXTRACT:
        raise DruidSqlError(f"{fn}: unknown unit {unit!r}; the units are EPOCH, MILLISECOND, MICROSECOND, "
                            f"{', '.join(_EXTRACT)}")
    return call("date_part", sql_string(_EXTRACT[unit]), _local(ts, zone, session))


# Joda-Time pattern letters as DuckDB strftime / strptime directives; Z, ZZ (offsets) and ZZZ (zone id) apart
_JODA = {"yyyy": "%Y", "YYYY": "%Y", "yy": "%y", "YY": "%y", "y": "%Y", "xxxx": "%G", "ww": "%V", "w": "%V",
         "MMMM": "%B", "MMM": "%b", "MM": "%m", "M": "%-m", "dd": "%d", "d": "%-d", "DDD": "%j", "D": "%-j",
         "EEEE": "%A", "EEE": "%a", "E": "%a", "e": "%u", "HH": "%H", "H": "%-H", "hh": "%I", "h": "%-I",
         "a": "%p", "mm": "%M", "m": "%-M", "ss": "%S", "s": "%-S", "SSSSSSSSS": "%n", "SSSSSS": "%f",
         "SSS": "%g", "ZZZ": "", "ZZ": "", "Z": ""}
_JODA_LETTERS = sorted(_JODA, key=len, reverse=True)
ISO_PATTERN = "yyyy-MM-dd'T'HH:mm:ss.SSS"


def _joda(fn: str, pattern: str) -> list[tuple[str, bool]]:
    try:
        return joda_parse_tokens(pattern, _JODA_LETTERS)
    except ValueError as exc:
        raise DruidSqlError(f"{fn}: {exc}") from None


def _time_format(fn: str, args: list, session: str) -> exp.Expression:
    arity(fn, args, 1, 3)
    ts, pattern_arg, zone_arg = (args + [None, None])[:3]
    pattern = string_arg(fn, pattern_arg, "pattern")
    zone = _zone(fn, zone_arg, session)
    local = _local(ts, zone, session)
    if pattern is None:  # ISO-8601 as Joda's ISODateTimeFormat.dateTime() prints it: 'Z' for a zero offset
        return exp.DPipe(this=call("strftime", local, sql_string("%Y-%m-%dT%H:%M:%S.%g")),
                         expression=call("druid_offset", instant(ts.copy()), sql_string(zone), sql_string(":"),
                                          exp.true()))
    pieces: list[exp.Expression] = []
    directives = ""
    for text, letter in _joda(fn, pattern):
        if letter and text.startswith("Z"):
            if directives:
                pieces.append(call("strftime", local.copy(), sql_string(directives)))
                directives = ""
            pieces.append(sql_string(zone) if text == "ZZZ" else call(
                "druid_offset", instant(ts.copy()), sql_string(zone), sql_string(":" if text == "ZZ" else ""),
                exp.false()))
        else:
            directives += _JODA[text] if letter else text.replace("%", "%%")
    if directives:
        pieces.append(call("strftime", local.copy(), sql_string(directives)))
    return pieces[0] if len(pieces) == 1 else call("concat", *pieces)


def _time_parse(fn: str, args: list, session: str) -> exp.Expression:
    arity(fn, args, 1, 3)
    text, pattern_arg, zone_arg = (args + [None, None])[:3]
    pattern = string_arg(fn, pattern_arg, "pattern")
    zone = _zone(fn, zone_arg, session)
    as_text = exp.Cast(this=text, to=exp.DataType.build("VARCHAR"))
    if pattern is None:
        return call("druid_parse_iso", as_text, sql_string(zone))
    directives, zoned = "", False
    for token, letter in _joda(fn, pattern):
        if letter and token == "ZZZ":
            raise DruidSqlError(f"{fn}: parsing a zone id (ZZZ) is not supported here; parse an offset (Z)")
        if letter and token.startswith("Z"):
            directives, zoned = directives + "%z", True
        else:
            directives += _JODA[token] if letter else token.replace("%", "%%")
    parsed = call("try_strptime", as_text, sql_string(directives))
    return instant(parsed) if zoned or _native(zone, session) else call("timezone", sql_string(zone), parsed)


def _millis_to_timestamp(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 1, 1)
    return instant(call("epoch_ms", exp.Cast(this=args[0], to=exp.DataType.build("BIGINT"))))


def _timestamp_to_millis(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 1, 1)
    return call("epoch_ms", instant(args[0]))


_CALENDAR_UNITS = ("MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR")


def _unit(fn: str, arg: exp.Expression) -> str:
    unit = (arg.name if isinstance(arg, (exp.Column, exp.Var, exp.Identifier)) else
            string_arg(fn, arg, "unit") or "").upper()
    if unit not in _CALENDAR_UNITS:
        raise DruidSqlError(f"{fn}: unknown time unit {unit or arg.sql('duckdb')!r}; the units are "
                            f"{', '.join(_CALENDAR_UNITS)}")
    return unit.lower()


def _floor_to(fn: str, args: list, session: str) -> exp.Expression:
    unit = _unit("FLOOR", args[1])
    return _from_local(call("date_trunc", sql_string(unit), _local(args[0], session, session)), session, session)


def _ceil_to(fn: str, args: list, session: str) -> exp.Expression:
    unit = _unit("CEIL", args[1])
    return call("druid_ceil", instant(args[0]), _floor_to(fn, [args[0].copy(), args[1]], session),
                 sql_string(f"1 {unit}"), sql_string(session))


# Druid adds a day-time unit as a fixed length (Calcite's day-time interval: a day is 24 hours) and a month,
# quarter or year on the calendar in the query's zone (TIME_SHIFT)
_FIXED_SECONDS = {"millisecond": 0.001, "second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


def _timestampadd(fn: str, args: list, session: str) -> exp.Expression:
    arity(fn, args, 3, 3)
    unit = _unit(fn, args[0])
    count = exp.Cast(this=args[1], to=exp.DataType.build("BIGINT"))
    if unit in _FIXED_SECONDS:
        step = exp.Cast(this=sql_string(f"{_FIXED_SECONDS[unit] * 1_000_000:.0f} microseconds"),
                        to=exp.DataType.build("INTERVAL"))
        return exp.Add(this=instant(args[2]), expression=exp.Mul(this=count, expression=step))
    return call("druid_shift", instant(args[2]), sql_string(f"1 {unit}"), count, sql_string(session))


def _timestampdiff(fn: str, args: list) -> exp.Expression:
    arity(fn, args, 3, 3)
    return call("date_sub", sql_string(_unit(fn, args[0])), instant(args[1]), instant(args[2]))


def _time_in_interval(fn: str, args: list, session: str) -> exp.Expression:
    arity(fn, args, 2, 2)
    text = string_arg(fn, args[1], "interval") or ""
    try:
        start_text, end_text = text.split("/")
        start = None if start_text.upper().startswith("P") else _wall_or_instant(start_text)
        end = None if end_text.upper().startswith("P") else _wall_or_instant(end_text)
        if start is None and end is not None:
            start = Period.parse(start_text).subtract_from(end)
        elif end is None and start is not None:
            end = Period.parse(end_text).add_to(start)
    except (ValueError, PeriodError):
        raise DruidSqlError(f"{fn}: {text!r} is not an ISO-8601 interval such as '2001-01-01/P1D'") from None
    if start is None or end is None:
        raise DruidSqlError(f"{fn}: {text!r} is not an ISO-8601 interval such as '2001-01-01/P1D'")
    ts = instant(args[0])
    return exp.Paren(this=exp.And(this=exp.GTE(this=ts, expression=_bound(start)),
                                  expression=exp.LT(this=ts.copy(), expression=_bound(end))))


_TEXT_OFFSET = re.compile(r"(Z|[+-]\d\d(:?\d\d)?)$", re.IGNORECASE)


def _wall_or_instant(text: str) -> datetime:
    """An interval end: an instant when the text gives its offset, else wall-clock time (in the query's zone,
    as Druid reads it), a naive datetime."""
    when = parse_datetime(text)
    time_part = text.strip().upper().partition("T")[2]
    return when if time_part and _TEXT_OFFSET.search(time_part) else when.replace(tzinfo=None)


def _bound(when: datetime) -> exp.Expression:
    # a naive one reads in the session's zone: DuckDB's cast of text without an offset to TIMESTAMPTZ
    return instant(sql_string(format_datetime(when) if when.tzinfo else when.isoformat(sep=" ")))



# the rewrites that read the query's sqlTimeZone (their default zone)
ZONED: dict[str, Callable[[str, list, str], exp.Expression]] = {
    "TIME_FLOOR": _time_floor, "TIME_CEIL": _time_ceil, "TIME_SHIFT": _time_shift,
    "TIME_EXTRACT": _time_extract, "TIME_FORMAT": _time_format, "TIME_PARSE": _time_parse,
    "TIME_IN_INTERVAL": _time_in_interval, "FLOOR_TO": _floor_to, "CEIL_TO": _ceil_to, "TIMESTAMPADD": _timestampadd,
}
REWRITES: dict[str, Rewrite] = {
    "MILLIS_TO_TIMESTAMP": _millis_to_timestamp, "TIMESTAMP_TO_MILLIS": _timestamp_to_millis,
    "TIMESTAMPDIFF": _timestampdiff,
}

# The DuckDB macros the time rewrites call (created by `druid_sql.register` on a connection whose query calls them)
MACROS = {
    # TIME_CEIL / CEIL(.. TO ..): the floor itself when already on a boundary, else one period later (in the zone)
    "druid_ceil": "(t, fl, step, tz) AS CASE WHEN fl = t THEN fl "
                  "ELSE timezone(tz, timezone(tz, fl) + CAST(step AS INTERVAL)) END",
    "druid_shift": "(t, step, n, tz) AS timezone(tz, timezone(tz, t) + CAST(n AS BIGINT) * CAST(step AS INTERVAL))",
    # the zone's offset from UTC at `t`, in seconds, then as Joda prints it (Z: +0800, ZZ: +08:00; `zulu`: 'Z'
    # for a zero offset, as ISO-8601 output does)
    "druid_offset_seconds": "(t, tz) AS CAST(epoch(timezone(tz, t)) - epoch(timezone('UTC', t)) AS BIGINT)",
    "druid_offset": "(t, tz, sep, zulu) AS CASE WHEN zulu AND druid_offset_seconds(t, tz) = 0 THEN 'Z' "
                    "ELSE printf('%s%02d%s%02d', CASE WHEN druid_offset_seconds(t, tz) < 0 THEN '-' ELSE '+' END, "
                    "abs(druid_offset_seconds(t, tz)) // 3600, sep, abs(druid_offset_seconds(t, tz)) % 3600 // 60) "
                    "END",
    # ISO-8601 text: an offset in the text wins, else the text is wall-clock time in `tz`
    "druid_parse_iso": "(s, tz) AS CASE "
                       r"WHEN regexp_matches(trim(s), '\d[T ]\d.*(Z|[+-]\d\d(:?\d\d)?)$') "
                       "THEN TRY_CAST(trim(s) AS TIMESTAMPTZ) ELSE timezone(tz, TRY_CAST(trim(s) AS TIMESTAMP)) END",
}
