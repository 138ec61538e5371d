"""Druid SQL for the DuckDB that runs `ingest query` and the SQL endpoint (`query.engine`).

    duckdb_sql = to_duckdb("SELECT TIME_FLOOR(__time, 'PT1H') AS h, APPROX_COUNT_DISTINCT_DS_THETA(uid) FROM t GROUP BY 1")
    register(con, duckdb_sql)   # on the query's connection: the macros and sketch UDFs that text calls

sqlglot reads the text (its `druid` dialect) and the functions Druid spells its own way are rewritten to DuckDB:
time functions to DuckDB's, through the `druid_*` macros below (Druid's time zone and origin rules); LATEST /
EARLIEST to `arg_max_null` / `arg_min_null` over `__time`; DataSketches aggregates to `list(x)` (FILTER and OVER
kept) finished by a UDF of `sketch_functions`. A query without any of them is passed on as written, so DuckDB's
own SQL keeps working unchanged; one that sqlglot cannot read is passed on too (DuckDB then says what is wrong),
unless it calls a Druid function. A Druid function this server does not have, or a literal argument Druid would
refuse, is refused in one line naming the function (`DruidSqlError`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable
from datetime import datetime

import sqlglot
from sqlglot import exp
from sqlglot.dialects.druid import Druid
from sqlglot.parsers.druid import DruidParser

from ingest_core.core.errors import IngestError
from ingest_core.core.periods import Period, PeriodError, format_datetime, parse_datetime
from ingest_core.core.time_formats import joda_parse_tokens
from ingest_core.query import sketch_functions as sk


class DruidSqlError(IngestError):
    """Druid SQL this server cannot run: a Druid function it does not have, or an argument Druid takes only as a
    literal (a period, a time zone, a pattern) given otherwise or malformed."""

    code = "INGEST_SQL_UNSUPPORTED"


class _Parser(DruidParser):
    # kept as written, rewritten below: sqlglot's generic builders read TIMESTAMPADD / TIMESTAMPDIFF in another
    # argument order than Calcite's (unit first), take no maxBytesPerString in ANY_VALUE, read REGEXP_EXTRACT's
    # third argument as a position (Druid's is the capture group, as DuckDB's)
    FUNCTIONS = {**DruidParser.FUNCTIONS,
                 **{name: (lambda name: lambda args: exp.Anonymous(this=name, expressions=args))(name)
                    for name in ("TIMESTAMPADD", "TIMESTAMPDIFF", "ANY_VALUE", "REGEXP_EXTRACT")}}


class DruidDialect(Druid):
    Parser = _Parser


def to_duckdb(sql: str, zone: str = "UTC") -> str:
    """The query as DuckDB SQL: unchanged when it uses no Druid function (or sqlglot cannot read it). `zone` is
    the query's `sqlTimeZone`, the DuckDB session's TimeZone: the default zone of Druid's time functions.

    sqlglot's parser recurses a few dozen frames per nesting level, so a query nested past Python's recursion
    limit (about 40 levels of parentheses) is one it cannot read: passed on to DuckDB (which bounds its own
    nesting), or refused in one line when it calls a Druid function. Its warnings are never logged
    (`quiet_sqlglot`): what becomes of a query it cannot read is said in one line, by this or by DuckDB."""
    if _EXPLAIN.match(sql):
        raise DruidSqlError("EXPLAIN PLAN FOR is not supported here: this server runs Druid SQL on DuckDB and has no "
                            "Druid native query plan to show; run the query itself (with a LIMIT) instead")
    try:
        with quiet_sqlglot():
            return _to_duckdb(sql, zone)
    except RecursionError:
        called = [n for n in _REWRITES if n not in _DUCKDB_HAS and _calls(sql, n)]
        if called:
            raise DruidSqlError(f"the query calls Druid SQL's {called[0]} but nests too deeply to be read as Druid "
                                "SQL (parentheses or calls within each other): nest fewer levels, or name the "
                                "inner parts in a WITH") from None
        return sql


_EXPLAIN = re.compile(r"\s*EXPLAIN\s+PLAN\b", re.IGNORECASE)


class _Quiet(logging.Filter):
    """Drops the records of sqlglot's logger while this thread is in `quiet_sqlglot`."""

    def __init__(self) -> None:
        super().__init__()
        self.threads = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self.threads, "quiet", False)


_QUIET = _Quiet()
logging.getLogger("sqlglot").addFilter(_QUIET)  # sqlglot logs on this one logger only


@contextlib.contextmanager
def quiet_sqlglot():
    """No warning of sqlglot's in the server's log or on stderr while the block runs (in this thread only:
    another thread's use of sqlglot logs as it would)."""
    before = getattr(_QUIET.threads, "quiet", False)
    _QUIET.threads.quiet = True
    try:
        yield
    finally:
        _QUIET.threads.quiet = before


def _to_duckdb(sql: str, zone: str) -> str:
    try:
        trees = sqlglot.parse(sql, read=DruidDialect)
    except sqlglot.errors.SqlglotError as exc:
        called = [n for n in _REWRITES if n not in _DUCKDB_HAS and _calls(sql, n)]
        if called:  # DuckDB would only say it has no such function
            errors = getattr(exc, "errors", None) or [{}]
            where = f" (line {errors[0]['line']}, column {errors[0]['col']})" if "line" in errors[0] else ""
            reason = errors[0].get("description") or str(exc).splitlines()[0]
            raise DruidSqlError(f"the query calls Druid SQL's {called[0]} but does not read as Druid SQL: "
                                f"{reason}{where}") from None
        return sql
    if len(trees) != 1 or trees[0] is None:
        return sql
    tree = trees[0]
    changed = False
    for node in reversed(list(tree.walk())):  # children first: a rewritten argument is in place for its parent
        if zone != UTC and _timestamp_literal(node):  # Druid's TIMESTAMP is an instant: wall-clock time in the zone
            node.set("to", exp.DataType.build("TIMESTAMPTZ", dialect="duckdb"))
            changed = True
            continue
        name = _druid_name(node)
        if name is None:
            continue
        if name in UNSUPPORTED or name.startswith(("MV_", "DS_TUPLE_", "TDIGEST_", "BLOOM_")):
            raise DruidSqlError(f"Druid SQL function {name} is not supported here (docs/sql.md, "
                                f"'Druid SQL', lists the Druid SQL functions this server runs)")
        rewrite = _REWRITES.get(name)
        if rewrite is None:
            continue
        args = _args(node)
        new = _ZONED[name](name, args, zone) if name in _ZONED else rewrite(name, args)
        if name in _AGGREGATES:
            node, new = _keep_filter_and_window(node, new)
        node.replace(new)
        if node is tree:
            tree = new
        changed = True
    if changed or any(_calls(sql, name) for name in _SQLGLOT_SPELLS):
        return tree.sql(dialect="duckdb")
    return sql


def _timestamp_literal(node: exp.Expression) -> bool:
    return (isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string
            and node.to.is_type(exp.DataType.Type.TIMESTAMP))


def _calls(sql: str, name: str) -> bool:
    return re.search(rf"\b{name}\s*\(", sql, re.IGNORECASE) is not None


# Druid functions DuckDB lacks that sqlglot's DuckDB output spells DuckDB's way by itself
_SQLGLOT_SPELLS = ("NVL", "REGEXP_LIKE", "SAFE_DIVIDE", "TRUNCATE")


def _druid_name(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Anonymous):
        return str(node.this).upper()
    if isinstance(node, (exp.Floor, exp.Ceil)) and node.args.get("to") is not None:
        return "FLOOR_TO" if isinstance(node, exp.Floor) else "CEIL_TO"
    if isinstance(node, exp.ApproxDistinct):
        return "APPROX_COUNT_DISTINCT"
    if isinstance(node, exp.JSONValue):
        return "JSON_VALUE"
    if isinstance(node, exp.Func) and node.sql_name() in UNSUPPORTED:  # one sqlglot parses to its own node
        return node.sql_name()
    return None


def _args(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    if isinstance(node, (exp.Floor, exp.Ceil)):
        return [node.this, node.args["to"]]
    if isinstance(node, exp.JSONValue):
        return [node.this, node.args["path"], node.args.get("returning")]
    return [node.this, *node.expressions] if isinstance(node.this, exp.Expression) else list(node.expressions)


def _keep_filter_and_window(node: exp.Expression, new: exp.Expression) -> tuple[exp.Expression, exp.Expression]:
    """An aggregate under FILTER (WHERE ..) and/or OVER (..): a rewrite that is a DuckDB aggregate keeps them as
    they are; otherwise they move onto the `list(x)` inside the rewrite, and the whole construct is replaced."""
    if isinstance(new, exp.Anonymous) and str(new.this).lower() in ("arg_max_null", "arg_min_null", "any_value"):
        return node, new
    target = next(n for n in new.walk() if isinstance(n, exp.Anonymous) and str(n.this).lower() == "list")
    outer = node
    while isinstance(outer.parent, (exp.Filter, exp.Window)) and outer.parent.this is outer:
        wrapper = outer.parent.copy()
        wrapper.set("this", target.copy())
        target.replace(wrapper)
        target, outer = wrapper, outer.parent
    return outer, new


# ------------------------------------------------------------------------------------------ literals


def _string(fn: str, arg: exp.Expression | None, what: str, default: str | None = None) -> str | None:
    if arg is None or isinstance(arg, exp.Null):
        return default
    if isinstance(arg, exp.Literal) and arg.is_string:
        return arg.this
    raise DruidSqlError(f"{fn}: the {what} must be a string literal, not {arg.sql('duckdb')}")


def _number(fn: str, arg: exp.Expression | None, what: str, default: float) -> float:
    if arg is None or isinstance(arg, exp.Null):
        return default
    value = arg.this if isinstance(arg, exp.Neg) else arg
    if isinstance(value, exp.Literal) and not value.is_string:
        number = float(value.this)
        return -number if isinstance(arg, exp.Neg) else number
    raise DruidSqlError(f"{fn}: the {what} must be a number literal, not {arg.sql('duckdb')}")


def _arity(fn: str, args: list, low: int, high: int) -> None:
    if not low <= len(args) <= high:
        expected = str(low) if low == high else f"{low} to {high}"
        raise DruidSqlError(f"{fn} takes {expected} arguments, not {len(args)}")


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


def _str(text: str) -> exp.Expression:
    return exp.Literal.string(text)


def _num(value: float) -> exp.Expression:
    return exp.Literal.number(int(value) if float(value).is_integer() else value)


def _instant(arg: exp.Expression) -> exp.Expression:
    """A Druid TIMESTAMP (always UTC) as DuckDB's TIMESTAMP WITH TIME ZONE (the session's zone is UTC)."""
    return exp.Cast(this=arg, to=exp.DataType.build("TIMESTAMPTZ", dialect="duckdb"))


# ------------------------------------------------------------------------------------------ time


UTC = "UTC"
_OFFSET = re.compile(r"^[+-]\d{1,2}(:?\d{2})?$")


def _zone(fn: str, arg: exp.Expression | None, session: str) -> str:
    """Druid's time zone argument: a zone name, or an offset such as '-08:00' (ICU's 'GMT-08:00'); the query's
    sqlTimeZone when not given."""
    zone = _string(fn, arg, "time zone", session)
    return f"GMT{zone}" if _OFFSET.match(zone) else zone


def _period(fn: str, arg: exp.Expression | None) -> Period:
    text = _string(fn, arg, "period")
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
    return _instant(ts) if _native(zone, session) else _call("timezone", _str(zone), _instant(ts))


def _from_local(local: exp.Expression, zone: str, session: str) -> exp.Expression:
    return local if _native(zone, session) else _call("timezone", _str(zone), local)


def _floor(fn: str, ts: exp.Expression, period: Period, origin: exp.Expression | None, zone: str,
           session: str) -> exp.Expression:
    """Druid's PeriodGranularity: a one-unit period without origin floors to the unit in the zone (weeks start
    Monday); otherwise buckets of the period counted from the origin (default 1970-01-01T00:00 in the zone)."""
    unit = _single_unit(period)
    if unit is not None and (origin is None or isinstance(origin, exp.Null)):
        return _from_local(_call("date_trunc", _str(unit), _local(ts, zone, session)), zone, session)
    step = exp.Cast(this=_str(_interval(fn, period)), to=exp.DataType.build("INTERVAL"))
    if origin is None or isinstance(origin, exp.Null):
        local_origin = (_instant(_str("1970-01-01 00:00:00+00")) if _native(zone, session) else
                        exp.Cast(this=_str("1970-01-01 00:00:00"), to=exp.DataType.build("TIMESTAMP")))
    else:
        local_origin = _local(origin, zone, session)
    return _from_local(_call("time_bucket", step, _local(ts, zone, session), local_origin), zone, session)


def _time_floor(fn: str, args: list, session: str) -> exp.Expression:
    _arity(fn, args, 2, 4)
    ts, period, origin, zone = (args + [None, None])[:4]
    return _floor(fn, ts, _period(fn, period), origin, _zone(fn, zone, session), session)


def _time_ceil(fn: str, args: list, session: str) -> exp.Expression:
    _arity(fn, args, 2, 4)
    ts, period_arg, origin, zone_arg = (args + [None, None])[:4]
    period, zone = _period(fn, period_arg), _zone(fn, zone_arg, session)
    floor = _floor(fn, ts, period, origin, zone, session)
    return _call("druid_ceil", _instant(ts.copy()), floor, _str(_shift_interval(period)), _str(zone))


def _shift_interval(period: Period) -> str:
    """A period as DuckDB interval text, calendar fields kept (P1M is a month, P1D a calendar day in the zone)."""
    parts = [f"{getattr(period, f)} {u}s" for f, u in _UNITS if getattr(period, f)]
    return " ".join(parts) or "0 seconds"


def _time_shift(fn: str, args: list, session: str) -> exp.Expression:
    _arity(fn, args, 3, 4)
    ts, period, step, zone = (args + [None])[:4]
    return _call("druid_shift", _instant(ts), _str(_shift_interval(_period(fn, period))), step,
                 _str(_zone(fn, zone, session)))


# Druid's TIME_EXTRACT / EXTRACT units (Joda fields) as DuckDB date parts
_EXTRACT = {"SECOND": "second", "MINUTE": "minute", "HOUR": "hour", "DAY": "day", "DOW": "isodow",
            "ISODOW": "isodow", "DOY": "doy", "WEEK": "week", "MONTH": "month", "QUARTER": "quarter",
            "YEAR": "year", "ISOYEAR": "isoyear", "DECADE": "decade", "CENTURY": "century",
            "MILLENNIUM": "millennium"}


def _time_extract(fn: str, args: list, session: str) -> exp.Expression:
    _arity(fn, args, 2, 3)
    ts, unit_arg, zone_arg = (args + [None])[:3]
    unit = (_string(fn, unit_arg, "unit") or "").upper()
    zone = _zone(fn, zone_arg, session)
    if unit == "EPOCH":
        return exp.IntDiv(this=_call("epoch_ms", _instant(ts)), expression=_num(1000))
    if unit in ("MILLISECOND", "MICROSECOND"):
        part, scale = ("millisecond", 1000) if unit == "MILLISECOND" else ("microsecond", 1_000_000)
        return exp.Mod(this=_call("date_part", _str(part), _local(ts, zone, session)), expression=_num(scale))
    if unit not in _EXTRACT:
        raise DruidSqlError(f"{fn}: unknown unit {unit!r}; the units are EPOCH, MILLISECOND, MICROSECOND, "
                            f"{', '.join(_EXTRACT)}")
    return _call("date_part", _str(_EXTRACT[unit]), _local(ts, zone, session))


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
    _arity(fn, args, 1, 3)
    ts, pattern_arg, zone_arg = (args + [None, None])[:3]
    pattern = _string(fn, pattern_arg, "pattern")
    zone = _zone(fn, zone_arg, session)
    local = _local(ts, zone, session)
    if pattern is None:  # ISO-8601 as Joda's ISODateTimeFormat.dateTime() prints it: 'Z' for a zero offset
        return exp.DPipe(this=_call("strftime", local, _str("%Y-%m-%dT%H:%M:%S.%g")),
                         expression=_call("druid_offset", _instant(ts.copy()), _str(zone), _str(":"),
                                          exp.true()))
    pieces: list[exp.Expression] = []
    directives = ""
    for text, letter in _joda(fn, pattern):
        if letter and text.startswith("Z"):
            if directives:
                pieces.append(_call("strftime", local.copy(), _str(directives)))
                directives = ""
            pieces.append(_str(zone) if text == "ZZZ" else _call(
                "druid_offset", _instant(ts.copy()), _str(zone), _str(":" if text == "ZZ" else ""), exp.false()))
        else:
            directives += _JODA[text] if letter else text.replace("%", "%%")
    if directives:
        pieces.append(_call("strftime", local.copy(), _str(directives)))
    return pieces[0] if len(pieces) == 1 else _call("concat", *pieces)


def _time_parse(fn: str, args: list, session: str) -> exp.Expression:
    _arity(fn, args, 1, 3)
    text, pattern_arg, zone_arg = (args + [None, None])[:3]
    pattern = _string(fn, pattern_arg, "pattern")
    zone = _zone(fn, zone_arg, session)
    as_text = exp.Cast(this=text, to=exp.DataType.build("VARCHAR"))
    if pattern is None:
        return _call("druid_parse_iso", as_text, _str(zone))
    directives, zoned = "", False
    for token, letter in _joda(fn, pattern):
        if letter and token == "ZZZ":
            raise DruidSqlError(f"{fn}: parsing a zone id (ZZZ) is not supported here; parse an offset (Z)")
        if letter and token.startswith("Z"):
            directives, zoned = directives + "%z", True
        else:
            directives += _JODA[token] if letter else token.replace("%", "%%")
    parsed = _call("try_strptime", as_text, _str(directives))
    return _instant(parsed) if zoned or _native(zone, session) else _call("timezone", _str(zone), parsed)


def _millis_to_timestamp(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 1, 1)
    return _instant(_call("epoch_ms", exp.Cast(this=args[0], to=exp.DataType.build("BIGINT"))))


def _timestamp_to_millis(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 1, 1)
    return _call("epoch_ms", _instant(args[0]))


_CALENDAR_UNITS = ("MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR")


def _unit(fn: str, arg: exp.Expression) -> str:
    unit = (arg.name if isinstance(arg, (exp.Column, exp.Var, exp.Identifier)) else
            _string(fn, arg, "unit") or "").upper()
    if unit not in _CALENDAR_UNITS:
        raise DruidSqlError(f"{fn}: unknown time unit {unit or arg.sql('duckdb')!r}; the units are "
                            f"{', '.join(_CALENDAR_UNITS)}")
    return unit.lower()


def _floor_to(fn: str, args: list, session: str) -> exp.Expression:
    unit = _unit("FLOOR", args[1])
    return _from_local(_call("date_trunc", _str(unit), _local(args[0], session, session)), session, session)


def _ceil_to(fn: str, args: list, session: str) -> exp.Expression:
    unit = _unit("CEIL", args[1])
    return _call("druid_ceil", _instant(args[0]), _floor_to(fn, [args[0].copy(), args[1]], session),
                 _str(f"1 {unit}"), _str(session))


# Druid adds a day-time unit as a fixed length (Calcite's day-time interval: a day is 24 hours) and a month,
# quarter or year on the calendar in the query's zone (TIME_SHIFT)
_FIXED_SECONDS = {"millisecond": 0.001, "second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


def _timestampadd(fn: str, args: list, session: str) -> exp.Expression:
    _arity(fn, args, 3, 3)
    unit = _unit(fn, args[0])
    count = exp.Cast(this=args[1], to=exp.DataType.build("BIGINT"))
    if unit in _FIXED_SECONDS:
        step = exp.Cast(this=_str(f"{_FIXED_SECONDS[unit] * 1_000_000:.0f} microseconds"),
                        to=exp.DataType.build("INTERVAL"))
        return exp.Add(this=_instant(args[2]), expression=exp.Mul(this=count, expression=step))
    return _call("druid_shift", _instant(args[2]), _str(f"1 {unit}"), count, _str(session))


def _timestampdiff(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 3, 3)
    return _call("date_sub", _str(_unit(fn, args[0])), _instant(args[1]), _instant(args[2]))


def _time_in_interval(fn: str, args: list, session: str) -> exp.Expression:
    _arity(fn, args, 2, 2)
    text = _string(fn, args[1], "interval") or ""
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
    ts = _instant(args[0])
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
    return _instant(_str(format_datetime(when) if when.tzinfo else when.isoformat(sep=" ")))


# ------------------------------------------------------------------------------------------ aggregates


def _list(arg: exp.Expression) -> exp.Expression:
    return _call("list", arg)


def _latest(fn: str, args: list) -> exp.Expression:
    by = fn.endswith("_BY")
    _arity(fn, args, 2 if by else 1, 3 if by else 2)  # maxBytesPerString: strings are not truncated here
    time = args[1] if by else exp.column("__time")
    return _call("arg_max_null" if fn.startswith("LATEST") else "arg_min_null", args[0], time)


def _any_value(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 1, 2)
    return _call("any_value", args[0])


def _theta_size(fn: str, arg: exp.Expression | None) -> exp.Expression:
    size = int(_number(fn, arg, "size", sk.THETA_SIZE))
    if size < 16 or size & (size - 1):
        raise DruidSqlError(f"{fn}: the size must be a power of 2 of at least 16, not {size}")
    return _num(size)


def _hll_params(fn: str, lg_k: exp.Expression | None, tgt: exp.Expression | None) -> list[exp.Expression]:
    k = int(_number(fn, lg_k, "lgK", sk.HLL_LG_K))
    if not 4 <= k <= 21:
        raise DruidSqlError(f"{fn}: lgK must be from 4 to 21, not {k}")
    kind = (_string(fn, tgt, "tgtHllType", sk.HLL_TYPE) or sk.HLL_TYPE).upper()
    if kind not in ("HLL_4", "HLL_6", "HLL_8"):
        raise DruidSqlError(f"{fn}: tgtHllType must be HLL_4, HLL_6 or HLL_8, not {kind!r}")
    return [_num(k), _str(kind)]


def _quantiles_k(fn: str, arg: exp.Expression | None) -> exp.Expression:
    k = int(_number(fn, arg, "k", sk.QUANTILES_K))
    if k < 2 or k > 32768 or k & (k - 1):
        raise DruidSqlError(f"{fn}: k must be a power of 2 from 2 to 32768, not {k}")
    return _num(k)


def _ds_theta(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 1, 2)
    name = "druid_ds_theta" if fn == "DS_THETA" else "druid_ds_theta_count"
    return _call(name, _list(args[0]), _theta_size(fn, args[1] if len(args) > 1 else None))


def _ds_hll(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 1, 1 if fn == "APPROX_COUNT_DISTINCT" else 3)
    name = "druid_ds_hll" if fn == "DS_HLL" else "druid_ds_hll_count"
    return _call(name, _list(args[0]), *_hll_params(fn, *(args[1:] + [None, None])[:2]))


def _ds_quantiles(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 1, 2)
    return _call("druid_ds_quantiles", _list(args[0]), _quantiles_k(fn, args[1] if len(args) > 1 else None))


def _approx_quantile_ds(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 2, 3)
    return _call("druid_quantile_ds", _list(args[0]), args[1], _quantiles_k(fn, args[2] if len(args) > 2 else None))


# ------------------------------------------------------------------------------------------ sketch functions


def _rename(name: str, low: int, high: int) -> Callable[[str, list], exp.Expression]:
    def rewrite(fn: str, args: list) -> exp.Expression:
        _arity(fn, args, low, high)
        return _call(name, *args)
    return rewrite


def _theta_bounds(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 2, 2)
    std = int(_number(fn, args[1], "errorBoundsStdDev", 1))
    if std not in (1, 2, 3):
        raise DruidSqlError(f"{fn}: errorBoundsStdDev must be 1, 2 or 3, not {std}")
    return _call("druid_theta_estimate_bounds", args[0], _num(std))


def _theta_set_op(fn: str, args: list) -> exp.Expression:
    size = None
    if args and isinstance(args[0], exp.Literal) and not args[0].is_string:
        size, args = args[0], args[1:]
    if not args:
        raise DruidSqlError(f"{fn} takes at least one sketch")
    op = {"THETA_SKETCH_UNION": "union", "THETA_SKETCH_INTERSECT": "intersect", "THETA_SKETCH_NOT": "not"}[fn]
    return _call("druid_theta_set_op", exp.Array(expressions=args), _str(op), _theta_size(fn, size))


def _hll_estimate(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 1, 2)
    estimate = _call("druid_hll_estimate", args[0])
    rounded = len(args) > 1 and isinstance(args[1], exp.Boolean) and args[1].this
    return _call("round", estimate) if rounded else estimate


def _hll_bounds(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 1, 2)
    std = int(_number(fn, args[1] if len(args) > 1 else None, "numStdDev", 1))
    if std not in (1, 2, 3):
        raise DruidSqlError(f"{fn}: numStdDev must be 1, 2 or 3, not {std}")
    return _call("druid_hll_estimate_bounds", args[0], _num(std))


def _hll_union(fn: str, args: list) -> exp.Expression:
    params = [None, None]
    if len(args) > 2 and isinstance(args[0], exp.Literal) and not args[0].is_string:
        params, args = args[:2], args[2:]
    if not args:
        raise DruidSqlError(f"{fn} takes at least one sketch")
    return _call("druid_hll_union", exp.Array(expressions=args), *_hll_params(fn, *params))


def _with_list(name: str) -> Callable[[str, list], exp.Expression]:
    def rewrite(fn: str, args: list) -> exp.Expression:
        if len(args) < 2:
            raise DruidSqlError(f"{fn} takes a sketch and at least one number")
        return _call(name, args[0], exp.Array(expressions=args[1:]))
    return rewrite


def _json_value(fn: str, args: list) -> exp.Expression:
    value, path, returning = args
    scalar = _call("druid_json_value", value, _str(path.sql("druid").strip("'")) if isinstance(path, exp.JSONPath)
                   else path)
    return exp.TryCast(this=scalar, to=returning) if isinstance(returning, exp.DataType) else scalar


def _json_query(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 2, 2)
    return _call("json_extract", *args)


# ------------------------------------------------------------------------------------------ string and number


def _icontains(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 2, 2)
    return _call("contains", _call("lower", args[0]), _call("lower", args[1]))


def _parse_long(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 1, 2)
    if int(_number(fn, args[1] if len(args) > 1 else None, "radix", 10)) != 10:
        raise DruidSqlError(f"{fn}: only radix 10 is supported here")
    return exp.TryCast(this=args[0], to=exp.DataType.build("BIGINT"))


def _operator(node: type[exp.Expression]) -> Callable[[str, list], exp.Expression]:
    def rewrite(fn: str, args: list) -> exp.Expression:
        _arity(fn, args, 2, 2)
        return exp.Paren(this=node(this=args[0], expression=args[1]))
    return rewrite


def _complement(fn: str, args: list) -> exp.Expression:
    _arity(fn, args, 1, 1)
    return exp.BitwiseNot(this=exp.Paren(this=args[0]))


# the rewrites that read the query's sqlTimeZone (their default zone)
_ZONED: dict[str, Callable[[str, list, str], exp.Expression]] = {
    "TIME_FLOOR": _time_floor, "TIME_CEIL": _time_ceil, "TIME_SHIFT": _time_shift,
    "TIME_EXTRACT": _time_extract, "TIME_FORMAT": _time_format, "TIME_PARSE": _time_parse,
    "TIME_IN_INTERVAL": _time_in_interval, "FLOOR_TO": _floor_to, "CEIL_TO": _ceil_to, "TIMESTAMPADD": _timestampadd,
}
_REWRITES: dict[str, Callable[..., exp.Expression]] = {
    **_ZONED,
    "MILLIS_TO_TIMESTAMP": _millis_to_timestamp, "TIMESTAMP_TO_MILLIS": _timestamp_to_millis,
    "TIMESTAMPDIFF": _timestampdiff,
    "LATEST": _latest, "EARLIEST": _latest, "LATEST_BY": _latest, "EARLIEST_BY": _latest,
    "ANY_VALUE": _any_value,
    "APPROX_COUNT_DISTINCT": _ds_hll, "APPROX_COUNT_DISTINCT_BUILTIN": _ds_hll,
    "APPROX_COUNT_DISTINCT_DS_HLL": _ds_hll, "DS_HLL": _ds_hll,
    "APPROX_COUNT_DISTINCT_DS_THETA": _ds_theta, "DS_THETA": _ds_theta,
    "DS_QUANTILES_SKETCH": _ds_quantiles, "APPROX_QUANTILE_DS": _approx_quantile_ds,
    "THETA_SKETCH_ESTIMATE": _rename("druid_theta_estimate", 1, 1),
    "THETA_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS": _theta_bounds,
    "THETA_SKETCH_UNION": _theta_set_op, "THETA_SKETCH_INTERSECT": _theta_set_op, "THETA_SKETCH_NOT": _theta_set_op,
    "HLL_SKETCH_ESTIMATE": _hll_estimate, "HLL_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS": _hll_bounds,
    "HLL_SKETCH_UNION": _hll_union,
    "DS_GET_QUANTILE": _rename("druid_ds_get_quantile", 2, 2), "DS_GET_QUANTILES": _with_list("druid_ds_get_quantiles"),
    "DS_RANK": _rename("druid_ds_rank", 2, 2), "DS_CDF": _with_list("druid_ds_cdf"),
    "DS_HISTOGRAM": _with_list("druid_ds_histogram"), "DS_QUANTILE_SUMMARY": _rename("druid_ds_quantile_summary", 1, 1),
    "JSON_VALUE": _json_value, "JSON_QUERY": _json_query,
    "TEXTCAT": _rename("concat", 2, 2), "CONTAINS_STRING": _rename("contains", 2, 2), "ICONTAINS_STRING": _icontains,
    "BTRIM": _rename("trim", 1, 2), "PARSE_LONG": _parse_long,
    "REGEXP_EXTRACT": _rename("regexp_extract", 2, 3), "BITWISE_AND": _operator(exp.BitwiseAnd),
    "BITWISE_OR": _operator(exp.BitwiseOr), "BITWISE_XOR": _operator(exp.BitwiseXor),
    "BITWISE_SHIFT_LEFT": _operator(exp.BitwiseLeftShift), "BITWISE_SHIFT_RIGHT": _operator(exp.BitwiseRightShift),
    "BITWISE_COMPLEMENT": _complement,
}
_DUCKDB_HAS = {"ANY_VALUE", "APPROX_COUNT_DISTINCT", "JSON_VALUE", "JSON_QUERY", "FLOOR_TO", "CEIL_TO",  # by name
               "REGEXP_EXTRACT"}
_AGGREGATES = {"LATEST", "EARLIEST", "LATEST_BY", "EARLIEST_BY", "ANY_VALUE", "APPROX_COUNT_DISTINCT",
               "APPROX_COUNT_DISTINCT_BUILTIN", "APPROX_COUNT_DISTINCT_DS_HLL", "DS_HLL",
               "APPROX_COUNT_DISTINCT_DS_THETA", "DS_THETA", "DS_QUANTILES_SKETCH", "APPROX_QUANTILE_DS"}

# Druid SQL functions (core and its extensions) this server does not run; besides these the MV_*, DS_TUPLE_*,
# TDIGEST_* and BLOOM_* families. Any other unknown function is DuckDB's to name.
UNSUPPORTED = {
    "APPROX_QUANTILE", "APPROX_QUANTILE_FIXED_BUCKETS", "LOOKUP", "STRING_TO_MV", "DECODE_BASE64_COMPLEX",
    "COMPLEX_DECODE_BASE64", "HLL_SKETCH_TO_STRING", "IPV4_MATCH", "IPV4_PARSE", "IPV4_STRINGIFY", "IPV6_MATCH",
    "STRING_FORMAT", "HUMAN_READABLE_BINARY_BYTE_FORMAT", "HUMAN_READABLE_DECIMAL_BYTE_FORMAT",
    "HUMAN_READABLE_DECIMAL_FORMAT", "JSON_PATHS", "TO_JSON_STRING", "PARSE_JSON", "TRY_PARSE_JSON",
    "ARRAY_CONCAT_AGG",
}

# The DuckDB macros the rewrites call (created by `register` on a connection whose query calls them)
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
    # JSON_VALUE: a scalar at the path as text; an object or array is null
    "druid_json_value": "(j, p) AS CASE WHEN json_type(j, p) IN ('OBJECT', 'ARRAY') THEN NULL "
                        "ELSE json_extract_string(j, p) END",
}


def register(con, sql: str) -> None:
    """The macros and sketch UDFs that DuckDB `sql` calls, on its connection (each costs a little to create:
    a query that calls none gets none)."""
    text = sql.lower()
    needed = {name for name in MACROS if name in text}
    needed |= {other for name in needed for other in MACROS if other in MACROS[name]}  # the macros it calls
    for name in MACROS:  # in order: a macro after those it calls
        if name in needed:
            con.execute(f"CREATE TEMP MACRO {name}{MACROS[name]}")
    sk.register(con, {name for name in sk.FUNCTIONS if name in text})
