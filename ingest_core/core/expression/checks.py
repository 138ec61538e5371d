"""Druid's expression language (the subset `transformSpec.transforms` accepts), parsed and checked: text -> a
tree of small value objects, with every problem found before any record is read.

Parsing lives here, with no I/O library, so that `ingest validate` and DAG parsing refuse what the Spark job
could not run; `ingest_core.executor.expressions` compiles the tree to vectorized pyarrow code.

  literals     123, 1.5, 1e3, NaN, Infinity, 'text' (Java escapes: \n, \u00e9, \'), null
  arrays       [1, 2], [1.5, null], ['a', 'b'], typed <LONG>[], <DOUBLE>[1], <STRING>['a', 1], ARRAY<LONG>[1]
  lambdas      (x) -> x + 1, x -> x, (x, acc) -> x + acc, () -> 1: only as the first argument of map, filter...
  columns      name, "quoted name"; `__time` is the row timestamp in epoch milliseconds
  operators    unary - and !, ^, * / %, + -, < <= > >= == !=, &&, ||  (Druid's precedence)
  functions    FUNCTIONS below, each with its arity and the arguments that must be constants

What is checked: the syntax, each function's name and arity, and every constant argument: regular
expressions compile (in the dialect RE2 and Python share, which the executor uses), periods and origins parse,
cast types, time units, time zones and timestamp patterns are known, regexp_extract's group exists, subnets are
CIDR, format() conversions are Java's, precisions and radixes are in range, numbers are numbers. Functions
Druid has but this cannot run (REFUSED) are refused by name with what to do instead.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Union

from ingest_core.core.binding import did_you_mean
from ingest_core.core.errors import IngestError, shown
from ingest_core.core.granularity import Granularity
from ingest_core.core.json_path import JsonPath, JsonPathError
from ingest_core.core.periods import Period, PeriodError, parse_datetime
from ingest_core.core.time_formats import joda_to_strptime, joda_tokens, time_zone, timestamp_format_problem


class ExpressionError(IngestError, ValueError):
    """An expression that cannot be parsed, uses something unsupported, or cannot be evaluated on a value."""

    code = "INGEST_EXPRESSION_ERROR"


# ------------------------------------------------------------------------------------------------ the tree


@dataclass(frozen=True)
class Literal:
    value: int | float | str | None


@dataclass(frozen=True)
class Column:
    name: str


@dataclass(frozen=True)
class Unary:
    op: str  # "-" or "!"
    operand: "Node"


@dataclass(frozen=True)
class Binary:
    op: str
    left: "Node"
    right: "Node"


@dataclass(frozen=True)
class Call:
    name: str  # lower case, a key of FUNCTIONS
    args: tuple["Node", ...]


@dataclass(frozen=True)
class ArrayLiteral:
    """`[1, 2]`, `<STRING>[]`: constant elements of one type (LONG, DOUBLE or STRING), nulls allowed."""

    element_type: str
    items: tuple[int | float | str | None, ...]


@dataclass(frozen=True)
class Lambda:
    """`(x, y) -> body`: only as the first argument of an apply function (map, filter, fold...). Its
    parameters hide columns of the same name inside the body; other names in the body are columns."""

    params: tuple[str, ...]
    body: "Node"


Node = Union[Literal, Column, Unary, Binary, Call, ArrayLiteral, Lambda]


@dataclass(frozen=True)
class Expression:
    """A parsed, checked expression: its text, its tree and the columns it reads."""

    text: str
    root: Node
    columns: frozenset[str]


# ------------------------------------------------------------------------------------------------ functions


@dataclass(frozen=True)
class Param:
    name: str
    kind: str = "any"        # any, string, number: what a constant argument must be
    constant: bool = False   # must be a literal (a pattern, a period, a type name...)
    optional: bool = False


@dataclass(frozen=True)
class Function:
    params: tuple[Param, ...]
    variadic: Param | None = None  # repeated after params; at least one when there are no params
    check: Callable[[str, tuple[Node, ...]], None] | None = None  # constant arguments beyond their kind

    def arity(self) -> str:
        required = sum(1 for p in self.params if not p.optional)
        if self.variadic is not None:
            return f"{max(required, 1)} or more arguments"
        most = len(self.params)
        if required == most:
            return f"{most} argument{'s' if most != 1 else ''}"
        return f"{required} to {most} arguments"

    def accepts(self, count: int) -> bool:
        required = sum(1 for p in self.params if not p.optional)
        if self.variadic is not None:
            return count >= max(required, 1)
        return required <= count <= len(self.params)

    def param(self, index: int) -> Param:
        return self.params[index] if index < len(self.params) else self.variadic  # type: ignore[return-value]


# array types, with Druid's legacy names (LONG_ARRAY ...): the section "arrays, lambdas, JSON" below
ARRAY_CAST_TYPES = {"ARRAY<LONG>": "LONG", "ARRAY<DOUBLE>": "DOUBLE", "ARRAY<STRING>": "STRING",
                    "LONG_ARRAY": "LONG", "DOUBLE_ARRAY": "DOUBLE", "STRING_ARRAY": "STRING"}
CAST_TYPES = ("LONG", "DOUBLE", "FLOAT", "STRING", *ARRAY_CAST_TYPES)
TIME_UNITS = ("EPOCH", "MICROSECOND", "MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "DOW", "ISODOW", "DOY", "WEEK",
              "MONTH", "QUARTER", "YEAR", "ISOYEAR", "DECADE", "CENTURY", "MILLENNIUM")

# Regular-expression syntax Python's `re` accepts but RE2 (pyarrow's engine, used for like/regexp_like and
# filters) refuses; both engines must read a pattern the same way.
_RE2_UNSUPPORTED = [
    (re.compile(r"\(\?<?[=!]"), "lookaround assertions ((?=...), (?!...), (?<=...), (?<!...))"),
    (re.compile(r"(?<!\\)(?:\\\\)*\\[1-9]"), "backreferences (\\1 ...)"),
    (re.compile(r"\(\?P="), "named backreferences ((?P=name))"),
    (re.compile(r"\(\?>"), "atomic groups ((?>...))"),
    (re.compile(r"[*+?}]\+"), "possessive quantifiers (*+, ++, ?+)"),
]


def python_regex(pattern: str) -> str:
    """Java's named groups `(?<name>...)` in Python's spelling `(?P<name>...)` (RE2 reads both)."""
    return re.sub(r"(?<!\\)\(\?<(?=[A-Za-z])", "(?P<", pattern)


def compile_regex(pattern: str, re2: bool = True) -> re.Pattern[str]:
    """A pattern both regex engines here read alike (RE2 for vectorized matching, Python for extraction), or
    with `re2=False` one only Python runs (regexp_replace: lookarounds and backreferences allowed, as Java's);
    ExpressionError naming what is wrong otherwise."""
    pattern = python_regex(pattern)
    for rx, what in _RE2_UNSUPPORTED if re2 else ():
        if rx.search(pattern):
            raise ExpressionError(f"the regular expression {pattern!r} uses {what}, which are not supported")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ExpressionError(f"{pattern!r} is not a valid regular expression: {exc}") from None


def like_to_regex(pattern: str, escape: str | None = None) -> str:
    """SQL LIKE (`%` any run, `_` one character, `escape` quoting the next) as an anchored regex."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if escape and ch == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return "^" + "".join(out) + "$"


def _constant(args: tuple[Node, ...], index: int) -> Any:
    arg = args[index] if index < len(args) else None
    return arg.value if isinstance(arg, Literal) else None


def _check_cast(name: str, args: tuple[Node, ...]) -> None:
    to = str(_constant(args, 1)).upper()
    if to not in CAST_TYPES:
        raise ExpressionError(f"cast to {_constant(args, 1)!r} is not supported{did_you_mean(to, CAST_TYPES)}; "
                              f"use one of {', '.join(repr(t) for t in CAST_TYPES)}")


def _check_regex_group(name: str, args: tuple[Node, ...]) -> None:
    rx = compile_regex(str(_constant(args, 1)))
    group = _constant(args, 2)
    if group is not None and not (isinstance(group, int) and 0 <= group <= rx.groups):
        raise ExpressionError(f"regexp_extract(): group {group!r} does not exist: the pattern "
                              f"{rx.pattern!r} has {rx.groups} group{'s' if rx.groups != 1 else ''} "
                              f"(0 is the whole match)")


def _check_pattern(name: str, args: tuple[Node, ...]) -> None:
    compile_regex(str(_constant(args, 1)))


def _check_like(name: str, args: tuple[Node, ...]) -> None:
    escape = _constant(args, 2)
    if escape is not None and len(str(escape)) != 1:
        raise ExpressionError(f"like(): the escape must be one character, got {shown(escape)}")


def _check_period(name: str, args: tuple[Node, ...]) -> None:
    text = str(_constant(args, 1))
    try:
        period = Period.parse(text)
        if name != "timestamp_shift":
            Granularity(text, period).floor_unit()
            if period.negative or period.is_zero:
                raise ValueError("it must be positive")
    except (PeriodError, ValueError) as exc:
        verb = {"timestamp_shift": "shift by", "timestamp_ceil": "round up to"}.get(name, "floor to")
        raise ExpressionError(f"{name}(): {shown(text)} is not a period to {verb} ({exc}); write an ISO-8601 period "
                              "such as 'PT1H' or 'P1D'") from None
    if name in ("timestamp_floor", "timestamp_ceil"):
        _check_origin(name, args)
        _check_zone_at(3)(name, args)
    elif name == "timestamp_shift":
        _check_zone_at(3)(name, args)


def _check_origin(name: str, args: tuple[Node, ...]) -> None:
    origin = _constant(args, 2)
    if isinstance(origin, str) and origin:
        try:
            parse_datetime(origin)
        except PeriodError as exc:
            raise ExpressionError(f"{name}(): the origin {exc}") from None


def _check_zone_at(index: int) -> Callable[[str, tuple[Node, ...]], None]:
    def check(name: str, args: tuple[Node, ...]) -> None:
        zone = _constant(args, index)
        if zone is not None:
            try:
                time_zone(str(zone))
            except ValueError as exc:
                raise ExpressionError(f"{name}(): {exc}") from None
    return check


def _check_unit(name: str, args: tuple[Node, ...]) -> None:
    unit = str(_constant(args, 1)).upper()
    if unit not in TIME_UNITS:
        raise ExpressionError(f"timestamp_extract(): unit {_constant(args, 1)!r} is not supported; use one of "
                              f"{', '.join(TIME_UNITS)}")
    _check_zone_at(2)(name, args)


def _check_timestamp_format(name: str, args: tuple[Node, ...]) -> None:
    fmt = _constant(args, 1)
    problem = timestamp_format_problem(str(fmt)) if fmt is not None else None
    if fmt is not None and name == "timestamp_parse" and not problem:  # Joda-Time patterns only, as Druid
        try:
            joda_to_strptime(str(fmt))
        except ValueError as exc:
            problem = f"{exc}; timestamp_parse takes a Joda-Time pattern (or none for ISO-8601 and SQL times)"
    if problem:
        raise ExpressionError(f"{name}(): {problem}")
    _check_zone_at(2)(name, args)


def _check_print_pattern(name: str, args: tuple[Node, ...]) -> None:
    fmt = _constant(args, 1)
    if fmt is not None:
        try:
            joda_tokens(str(fmt))
        except ValueError as exc:
            raise ExpressionError(f"{name}(): {exc}") from None
    _check_zone_at(2)(name, args)


def _check_ints(*indexes: int) -> Callable[[str, tuple[Node, ...]], None]:
    def check(name: str, args: tuple[Node, ...]) -> None:
        for i in indexes:
            if i < len(args) and isinstance(args[i], Literal) and not isinstance(_constant(args, i), int):
                raise ExpressionError(f"{name}(): argument {i + 1} must be a whole number, got "
                                      f"{_constant(args, i)!r}")
    return check


def _check_range(index: int, low: int, high: int) -> Callable[[str, tuple[Node, ...]], None]:
    def check(name: str, args: tuple[Node, ...]) -> None:
        _check_ints(index)(name, args)
        value = _constant(args, index)
        if isinstance(value, int) and not low <= value <= high:
            raise ExpressionError(f"{name}(): argument {index + 1} must be from {low} to {high}, got {value}")
    return check


def _check_substring(name: str, args: tuple[Node, ...]) -> None:
    _check_range(1, 0, 2 ** 31 - 1)(name, args)  # Java's substring throws for a negative index
    _check_ints(2)(name, args)


def _check_subnet(name: str, args: tuple[Node, ...]) -> None:
    subnet = str(_constant(args, 1))
    version = 6 if name == "ipv6_match" else 4
    try:
        network = ipaddress.ip_network(subnet, strict=False)
        if network.version != version or "/" not in subnet:
            raise ValueError
    except ValueError:
        example = "'75e9:efa4:29c6:85f6::/64'" if version == 6 else "'192.168.0.0/16'"
        raise ExpressionError(f"{name}(): {subnet!r} is not an IPv{version} subnet in CIDR notation (such as "
                              f"{example})") from None


def _check_java_format(name: str, args: tuple[Node, ...]) -> None:
    pattern = _constant(args, 0)
    if isinstance(pattern, str):
        for m in JAVA_FORMAT.finditer(pattern):
            if m.group("conv") is None:
                raise ExpressionError(f"format(): {m.group(0)!r} in {pattern!r} is not a conversion this format "
                                      f"supports; use %s %d %x %X %o %f %e %E %b %c %n %% (with flags, width and "
                                      "precision)")


# Java's String.format conversions that format() supports (flags - + space 0 , ( #; width; precision)
JAVA_FORMAT = re.compile(r"%(?:(?P<index>\d+)\$)?(?P<flags>[-#+ 0,(]*)(?P<width>\d+)?(?:\.(?P<precision>\d+))?"
                         r"(?:(?P<conv>[sSdxXofeEbBcn%])|.?)")


def _check_literal_string(index: int) -> Callable[[str, tuple[Node, ...]], None]:
    def check(name: str, args: tuple[Node, ...]) -> None:
        if not isinstance(_constant(args, index), str):
            raise ExpressionError(f"{name}(): argument {index + 1} must be a text constant ('...')")
    return check


def java_replacement(text: str) -> list[str | tuple[int | str]]:
    """A java.util.regex replacement (`$1`, `${name}`, `\\$`) as literal pieces and (group,) references;
    ExpressionError for a `$` that names no group."""
    out: list[str | tuple[int | str]] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
        elif ch == "$":
            m = re.match(r"\{(\w+)\}|(\d)", text[i + 1:])
            if not m:
                raise ExpressionError(f"regexp_replace(): illegal group reference in the replacement {shown(text)} "
                                      "(write \\$ for a dollar sign)")
            out.append((m.group(1) if m.group(1) else int(m.group(2)),))
            i += 1 + m.end()
        else:
            out.append(ch)
            i += 1
    return out


def _check_regex_replace(name: str, args: tuple[Node, ...]) -> None:
    rx = compile_regex(str(_constant(args, 1)), re2=False)  # run by Python's re only
    replacement = _constant(args, 2)
    if isinstance(replacement, str):
        for piece in java_replacement(replacement):
            if isinstance(piece, tuple) and not (piece[0] in rx.groupindex or
                                                 isinstance(piece[0], int) and piece[0] <= rx.groups):
                raise ExpressionError(f"regexp_replace(): the replacement {replacement!r} refers to group "
                                      f"{piece[0]!r}, which {rx.pattern!r} does not have")


_S, _N, _A = "string", "number", "any"


def _math(count: int) -> Function:
    return Function(tuple(Param(p, _N) for p in ("x", "y")[:count]))


MATH_1 = ("abs", "acos", "asin", "atan", "cbrt", "ceil", "cos", "cosh", "cot", "exp", "expm1", "floor",
          "getexponent", "log", "log10", "log1p", "nextup", "rint", "signum", "sin", "sinh", "sqrt", "tan", "tanh",
          "todegrees", "toradians", "ulp", "bitwisecomplement", "bitwiseconvertdoubletolongbits",
          "bitwiseconvertlongbitstodouble")
MATH_2 = ("atan2", "copysign", "div", "hypot", "max", "min", "nextafter", "pow", "remainder", "scalb",
          "safe_divide", "bitwiseand", "bitwiseor", "bitwisexor", "bitwiseshiftleft", "bitwiseshiftright")

FUNCTIONS: dict[str, Function] = {
    # general and conditional
    "cast": Function((Param("value"), Param("type", _S, True)), check=_check_cast),
    "coalesce": Function((), Param("value")),
    "if": Function((Param("condition"), Param("then"), Param("else"))),
    "nvl": Function((Param("value"), Param("otherwise"))),
    "case_searched": Function((Param("condition"), Param("result")), Param("more")),
    "case_simple": Function((Param("value"), Param("match"), Param("result")), Param("more")),
    "isnull": Function((Param("value"),)),
    "notnull": Function((Param("value"),)),
    "like": Function((Param("s", _S), Param("pattern", _S, True), Param("escape", _S, True, True)),
                     check=_check_like),
    # text
    "concat": Function((), Param("value")),
    "format": Function((Param("pattern", _S),), Param("value", optional=True), check=_check_java_format),
    "parse_long": Function((Param("s"), Param("radix", _N, optional=True)), check=_check_range(1, 2, 36)),
    "regexp_extract": Function((Param("s", _S), Param("pattern", _S, True), Param("index", _N, True, True)),
                               check=_check_regex_group),
    "regexp_like": Function((Param("s", _S), Param("pattern", _S, True)), check=_check_pattern),
    "regexp_replace": Function((Param("s", _S), Param("pattern", _S, True), Param("replacement", _S)),
                               check=_check_regex_replace),
    "contains_string": Function((Param("s", _S), Param("search", _S, True)), check=_check_literal_string(1)),
    "icontains_string": Function((Param("s", _S), Param("search", _S, True)), check=_check_literal_string(1)),
    "replace": Function((Param("s", _S), Param("pattern", _S, True), Param("replacement", _S, True))),
    "substring": Function((Param("s", _S), Param("index", _N, True), Param("length", _N, True, True)),
                          check=_check_substring),
    "right": Function((Param("s", _S), Param("length", _N)), check=_check_range(1, 0, 2 ** 31 - 1)),
    "left": Function((Param("s", _S), Param("length", _N)), check=_check_range(1, 0, 2 ** 31 - 1)),
    "strlen": Function((Param("s", _S),)),
    "strpos": Function((Param("haystack", _S), Param("needle", _S), Param("from", _N, optional=True)),
                       check=_check_ints(2)),
    "trim": Function((Param("s", _S), Param("chars", _S, optional=True))),
    "ltrim": Function((Param("s", _S), Param("chars", _S, optional=True))),
    "rtrim": Function((Param("s", _S), Param("chars", _S, optional=True))),
    "lower": Function((Param("s", _S),)),
    "upper": Function((Param("s", _S),)),
    "reverse": Function((Param("s", _S),)),
    "repeat": Function((Param("s", _S), Param("times", _N)), check=_check_ints(1)),
    "lpad": Function((Param("s", _S), Param("length", _N), Param("chars", _S)), check=_check_ints(1)),
    "rpad": Function((Param("s", _S), Param("length", _N), Param("chars", _S)), check=_check_ints(1)),
    # time
    "timestamp": Function((Param("s"), Param("format", _S, True, True)), check=_check_timestamp_format),
    "unix_timestamp": Function((Param("s"), Param("format", _S, True, True)), check=_check_timestamp_format),
    "timestamp_ceil": Function((Param("t"), Param("period", _S, True), Param("origin", constant=True, optional=True),
                                Param("timezone", _S, True, True)), check=_check_period),
    "timestamp_floor": Function((Param("t"), Param("period", _S, True), Param("origin", constant=True, optional=True),
                                 Param("timezone", _S, True, True)), check=_check_period),
    "timestamp_shift": Function((Param("t"), Param("period", _S, True), Param("step", _N),
                                 Param("timezone", _S, True, True)), check=_check_period),
    "timestamp_extract": Function((Param("t"), Param("unit", _S, True), Param("timezone", _S, True, True)),
                                  check=_check_unit),
    "timestamp_parse": Function((Param("s"), Param("pattern", _S, True, True), Param("timezone", _S, True, True)),
                                check=_check_timestamp_format),
    "timestamp_format": Function((Param("t"), Param("pattern", _S, True, True), Param("timezone", _S, True, True)),
                                 check=_check_print_pattern),
    # math
    **{name: _math(1) for name in MATH_1},
    **{name: _math(2) for name in MATH_2},
    "pi": Function(()),
    "round": Function((Param("x", _N), Param("scale", _N, True, True)), check=_check_ints(1)),
    # IP addresses
    "ipv4_match": Function((Param("address"), Param("subnet", _S, True)), check=_check_subnet),
    "ipv4_parse": Function((Param("address"),)),
    "ipv4_stringify": Function((Param("address"),)),
    "ipv6_match": Function((Param("address", _S), Param("subnet", _S, True)), check=_check_subnet),
    # other
    "human_readable_binary_byte_format": Function((Param("value", _N), Param("precision", _N, True, True)),
                                                  check=_check_range(1, 0, 3)),
    "human_readable_decimal_byte_format": Function((Param("value", _N), Param("precision", _N, True, True)),
                                                   check=_check_range(1, 0, 3)),
    "human_readable_decimal_format": Function((Param("value", _N), Param("precision", _N, True, True)),
                                              check=_check_range(1, 0, 3)),
    "decode_base64_utf8": Function((Param("s", _S),)),
    "greatest": Function((), Param("value")),
    "least": Function((), Param("value")),
}

# Druid functions refused by name, with what to do instead
REFUSED: dict[str, str] = {
    "lookup": "query-time lookups are not available to ingestion here; map the values with case_simple(x, "
              "'key1', 'value1', ..., 'default') in a transform, or apply the lookup in Druid at query time",
    "javascript": "JavaScript expressions are not run; write the logic with the expression functions (if, "
                  "case_searched, regexp_replace, ...)",
    "bloom_filter_test": "Druid's bloom filters (the druid-bloom-filter extension) are not read; test membership "
                         "with an `in` filter in transformSpec.filter or case_simple in a transform",
}


def _is_number_text(value: str) -> bool:
    try:
        float(value.strip())
        return True
    except ValueError:
        return False


def check_call(name: str, args: tuple[Node, ...], text: str) -> None:
    """A call's arity and constant arguments; ExpressionError naming the call otherwise."""
    fn = FUNCTIONS[name]
    if not fn.accepts(len(args)):
        raise ExpressionError(f"in expression {shown(text)}: {name}() takes {fn.arity()}, got {len(args)}")
    for i, arg in enumerate(args):
        param = fn.param(i)
        if param.constant and not isinstance(arg, Literal):
            raise ExpressionError(f"in expression {shown(text)}: {name}(): argument {i + 1} ({param.name}) must be "
                                  "a constant")
        if isinstance(arg, Literal) and arg.value is not None:
            value = arg.value
            if param.kind == _N and isinstance(value, str) and not _is_number_text(value):
                raise ExpressionError(f"in expression {shown(text)}: {name}(): argument {i + 1} ({param.name}) is a "
                                      f"number, got the text {shown(value)}")
        elif isinstance(arg, Literal) and param.constant and not param.optional:
            raise ExpressionError(f"in expression {shown(text)}: {name}(): argument {i + 1} ({param.name}) cannot "
                                  "be null")
    if fn.check is not None:
        try:
            fn.check(name, args)
        except ExpressionError as exc:
            raise ExpressionError(f"in expression {shown(text)}: {exc}") from None


# ------------------------------------------------------------------------------------------------ the parser

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<atype>ARRAY<(?:LONG|DOUBLE|STRING)>|<(?:LONG|DOUBLE|STRING)>)
     |(?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)
     |(?P<str>'(?:[^'\\]|\\.)*')
     |(?P<qid>"(?:[^"\\]|\\.)*")
     |(?P<id>[A-Za-z_$][A-Za-z0-9_$.]*)
     |(?P<op>->|<=|>=|==|!=|&&|\|\||[-+*/%^<>!(),\[\]])
    )""", re.VERBOSE)



# An expression nested deeper than this is refused: the parser recurses (about ten frames a level), and no
# real transform nests so far.
MAX_DEPTH = 40


def _tokenize(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"cannot read expression {shown(text)} at position {pos}: {text[pos:pos + 10]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))  # type: ignore[arg-type]
        pos = m.end()
    return out


_JAVA_ESCAPE = re.compile(r"\\(u+[0-9a-fA-F]{4}|[0-3][0-7]{0,2}|[4-7][0-7]?|.)", re.DOTALL)
_JAVA_CONTROL = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def unescape_java(text: str) -> str:
    """A quoted literal's escapes as Druid reads them (commons-text unescapeJava): \\n \\t \\uXXXX, octal,
    \\\\ and a quote; a backslash before any other character is dropped."""
    def one(m: re.Match[str]) -> str:
        body = m.group(1)
        if body[0] == "u" and len(body) >= 5:
            return chr(int(body[-4:], 16))
        if body[0].isdigit() and body[0] < "8":
            return chr(int(body, 8))
        return _JAVA_CONTROL.get(body, body)
    return _JAVA_ESCAPE.sub(one, text) if "\\" in text else text


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0
        self.columns: set[str] = set()
        self.scopes: list[tuple[str, ...]] = []  # the parameters of the lambdas being read
        self.past_long = 0  # whole-number literals of 2^63, legal only negated (-9223372036854775808)

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            found = "the end" if tok is None else repr(tok[1])
            raise ExpressionError(f"in expression {shown(self.text)}: expected {value or 'more input'}, found {found}")
        self.i += 1
        return tok

    def at(self, *values: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "op" and tok[1] in values

    def parse(self) -> Node:
        if not self.tokens:
            raise ExpressionError("the expression is empty")
        node = self.or_()
        if self.peek() is not None:
            raise ExpressionError(  # type: ignore[index]
                f"in expression {shown(self.text)}: unexpected {self.peek()[1]!r}")
        if self.past_long:
            raise ExpressionError(f"in expression {shown(self.text)}: the number 9223372036854775808 is outside the "
                                  "LONG range; write it with a '.' for a DOUBLE")
        return node

    def _binary(self, sub: Callable[[], Node], ops: tuple[str, ...]) -> Node:
        left = sub()
        while self.at(*ops):
            op = self.take()[1]
            left = Binary(op, left, sub())
        return left

    def or_(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"expression {self.text[:60]!r}... nests deeper than {MAX_DEPTH} levels")
        try:
            return self._binary(lambda: self._binary(self.comparison, ("&&",)), ("||",))
        finally:
            self.depth -= 1

    def comparison(self) -> Node:
        left = self.additive()
        if self.at("<", "<=", ">", ">=", "==", "!="):
            op = self.take()[1]
            return Binary(op, left, self.additive())
        return left

    def additive(self) -> Node:
        return self._binary(self.multiplicative, ("+", "-"))

    def multiplicative(self) -> Node:
        return self._binary(self.unary, ("*", "/", "%"))

    def unary(self) -> Node:
        if self.at("-", "!"):
            op = self.take()[1]
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ExpressionError(f"expression {self.text[:60]!r}... nests deeper than {MAX_DEPTH} levels")
            try:
                operand = self.unary()
            finally:
                self.depth -= 1
            if op == "-" and isinstance(operand, Literal) and isinstance(operand.value, (int, float)):
                if isinstance(operand.value, int):  # 2^63 fits once negated, and no longer if negated again
                    self.past_long += (-operand.value == 2 ** 63) - (operand.value == 2 ** 63)
                return Literal(-operand.value)  # a negative constant, so constant arguments may be negative
            return Unary(op, operand)
        base = self.primary()
        if self.at("^"):
            self.take()
            return Binary("^", base, self.unary())
        return base

    def primary(self) -> Node:
        kind, value = self.take()
        if kind == "num":
            if any(c in value for c in ".eE"):
                return Literal(float(value))
            if int(value) > 2 ** 63:
                raise ExpressionError(f"in expression {shown(self.text)}: the number {value} is outside the LONG "
                                      "range; write it with a '.' for a DOUBLE")
            self.past_long += int(value) == 2 ** 63
            return Literal(int(value))
        if kind == "str":
            return Literal(unescape_java(value[1:-1]))
        if kind == "op" and value == "(":
            inner = self.or_()
            self.take(")")
            return inner
        if kind == "atype" or (kind == "op" and value == "["):
            return self.array(kind == "atype" and value or None)
        if kind in ("id", "qid"):
            name = unescape_java(value[1:-1]) if kind == "qid" else value
            if kind == "id" and name == "null":
                return Literal(None)
            if kind == "id" and name in _SPECIAL_DOUBLES:
                return Literal(_SPECIAL_DOUBLES[name])
            if kind == "id" and self.at("("):
                return self.call(name)
            if not any(name in params for params in self.scopes):
                self.columns.add(name)
            return Column(name)
        raise ExpressionError(f"in expression {shown(self.text)}: unexpected {shown(value)}")

    def array(self, typed: str | None) -> ArrayLiteral:
        """An array literal, after its `[` (or its type, `<LONG>` / `ARRAY<LONG>`)."""
        if typed is not None:
            self.take("[")
        items: list[Node] = []
        if not self.at("]"):
            items.append(self.or_())
            while self.at(","):
                self.take()
                items.append(self.or_())
        self.take("]")
        if any(not isinstance(item, Literal) for item in items):
            raise ExpressionError(f"in expression {shown(self.text)}: array literal elements must be constants "
                                  "(numbers, 'text' or null); build an array of other values with array(...)")
        values = [item.value for item in items]  # type: ignore[union-attr]
        element = typed.strip("<>").removeprefix("ARRAY<") if typed else _literal_element_type(values)
        try:
            return ArrayLiteral(element, tuple(_array_element(v, element, typed is not None) for v in values))
        except (TypeError, ValueError) as exc:
            raise ExpressionError(f"in expression {shown(self.text)}: {exc}") from None

    def lambda_ahead(self) -> bool:
        """Whether the tokens ahead are a lambda's parameters and `->`: `x ->`, `() ->`, `(x, y) ->`."""
        toks = self.tokens[self.i:self.i + 2]
        if len(toks) == 2 and toks[0][0] in ("id", "qid") and toks[1] == ("op", "->"):
            return True
        if not toks or toks[0] != ("op", "("):
            return False
        j = self.i + 1
        while j < len(self.tokens) and self.tokens[j][0] in ("id", "qid"):
            j += 1
            if j < len(self.tokens) and self.tokens[j] == ("op", ","):
                j += 1
        return self.tokens[j:j + 2] == [("op", ")"), ("op", "->")]

    def lambda_(self) -> Lambda:
        params: list[str] = []
        parenthesized = self.at("(")
        if parenthesized:
            self.take("(")
        while self.peek() is not None and self.peek()[0] in ("id", "qid"):  # type: ignore[index]
            kind, value = self.take()
            params.append(unescape_java(value[1:-1]) if kind == "qid" else value)
            if parenthesized and self.at(","):
                self.take()
        if parenthesized:
            self.take(")")
        self.take("->")
        if len(set(params)) != len(params):
            raise ExpressionError(f"in expression {shown(self.text)}: a lambda names a parameter twice: {params}")
        self.scopes.append(tuple(params))
        try:
            body = self.or_()
        finally:
            self.scopes.pop()
        return Lambda(tuple(params), body)

    def call(self, name: str) -> Node:
        key = name.lower()
        if key in REFUSED:
            raise ExpressionError(f"in expression {shown(self.text)}: function {name}() is not supported: "
                                  f"{REFUSED[key]}")
        if key not in FUNCTIONS:
            raise ExpressionError(f"function {name}() is not supported in transforms{did_you_mean(key, FUNCTIONS)}; "
                                  f"supported: {', '.join(sorted(FUNCTIONS))}")
        self.take("(")
        args: list[Node] = []
        if not self.at(")"):
            args.append(self.lambda_() if self.lambda_ahead() else self.or_())
            while self.at(","):
                self.take()
                args.append(self.or_())
        self.take(")")
        check_call(key, tuple(args), self.text)
        if args and isinstance(args[0], Lambda) and key not in APPLY_FUNCTIONS:
            raise ExpressionError(f"in expression {shown(self.text)}: {name}() takes no lambda; only "
                                  f"{', '.join(sorted(APPLY_FUNCTIONS))} do")
        return Call(key, tuple(args))


_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf}


def _literal_element_type(values: list[Any]) -> str:
    """An untyped array literal's element type, as Druid's grammar gives it: text (or only nulls, or nothing)
    is STRING, whole numbers LONG, numbers with a fraction DOUBLE; text and numbers together are an error."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds or kinds == {str}:
        return "STRING"
    if str in kinds:
        raise ExpressionError(f"an array literal mixes text and numbers: {values}; write <STRING>[...] for text")
    return "LONG" if kinds == {int} else "DOUBLE"


def _array_element(value: Any, element: str, typed: bool) -> int | float | str | None:
    if value is None:
        return None
    if element == "STRING":
        return value if isinstance(value, str) else (repr(value) if isinstance(value, float) else str(value))
    if isinstance(value, str) and not typed:
        raise ValueError(f"{shown(value)} is not a number")
    number = float(value) if isinstance(value, str) else value
    if element == "LONG":
        if isinstance(number, float) and not math.isfinite(number):
            raise ValueError(f"{shown(value)} is not a LONG")
        return int(number)
    return float(number)


def parse_expression(text: str) -> Expression:
    """Parse and check `text`; ExpressionError says what is wrong and where."""
    if not isinstance(text, str):
        raise ExpressionError(f"an expression is text, got {type(text).__name__}")
    parser = _Parser(text)
    root = parser.parse()
    return Expression(text, root, frozenset(parser.columns))


# ------------------------------------------------------------------------------------------------ arrays, lambdas, JSON
# Druid's non-scalar functions, in their own tables (merged into FUNCTIONS below). Arrays are values of one element
# type (LONG, DOUBLE, STRING or JSON); apply functions take a lambda first; JSON functions read COMPLEX<json> values
# (nested input fields, parse_json's results) with the JSONPath subset of `core.json_path` ($, .name, ['name'], [0]).

JSON_TYPES = ("LONG", "DOUBLE", "STRING", "ARRAY<LONG>", "ARRAY<DOUBLE>", "ARRAY<STRING>")


def _check_lambda_count(arrays: Callable[[int], int]) -> Callable[[str, tuple[Node, ...]], None]:
    """An apply function's first argument is a lambda taking `arrays(argument count)` parameters."""
    def check(name: str, args: tuple[Node, ...]) -> None:
        if not isinstance(args[0], Lambda):
            raise ExpressionError(f"{name}(): argument 1 must be a lambda, such as (x) -> x + 1")
        wanted = arrays(len(args))
        if len(args[0].params) != wanted:
            raise ExpressionError(f"{name}(): lambda expression argument count of {len(args[0].params)} does not "
                                  f"match the {wanted} arguments passed to it")
    return check


def _check_split_pattern(name: str, args: tuple[Node, ...]) -> None:
    if isinstance(args[1], Literal) and args[1].value is not None:
        compile_regex(str(args[1].value))


def _check_json_path(index: int) -> Callable[[str, tuple[Node, ...]], None]:
    def check(name: str, args: tuple[Node, ...]) -> None:
        path = _constant(args, index)
        if path is not None:
            try:
                json_path(str(path))
            except JsonPathError as exc:
                raise ExpressionError(f"{name}(): {exc}") from None
    return check


def json_path(text: str) -> JsonPath:
    """A JSON function's path, read as Druid's NestedPathFinder.parseJsonPath reads it: `$` (or `$.`) the root,
    `.name` a field (any character but `.` and `[`), `['name']` a field, `[0]` a list element. JsonPathError
    says what is wrong, as flattenSpec's paths (`core.json_path`, which evaluates both)."""
    def bad(why: str) -> JsonPathError:
        return JsonPathError(f"JSONPath {shown(text)}: {why}; write e.g. $.a.b, $.a[0] or $['a b']")

    if not text.startswith("$"):
        raise bad("it must start with '$'")
    steps: list[str | int] = []
    i = 1
    while i < len(text):
        if text[i] == ".":
            end = min((j for j in (text.find(".", i + 1), text.find("[", i + 1)) if j >= 0), default=len(text))
            if end == i + 1 and end < len(text):
                raise bad(f"an empty name at position {i + 1}")
            if end > i + 1:
                steps.append(text[i + 1:end])
            i = end
        elif text.startswith("['", i):
            end = text.find("']", i + 2)
            if end < 0:
                raise bad("an unterminated ['")
            steps.append(text[i + 2:end])
            i = end + 2
        elif text[i] == "[":
            end = text.find("]", i)
            index = text[i + 1:end] if end > 0 else ""
            if not index.isdigit():
                raise bad(f"[{index}] is not a list index (0, 1, ...; a name is written ['name'])")
            steps.append(int(index))
            i = end + 1
        else:
            raise bad(f"path parts must be separated with '.' (position {i})")
    return JsonPath(text, tuple(steps))


def _check_json_value(name: str, args: tuple[Node, ...]) -> None:
    _check_json_path(1)(name, args)
    if len(args) > 2:
        to = str(_constant(args, 2)).upper()
        if to not in JSON_TYPES:
            raise ExpressionError(f"{name}(): returning type {_constant(args, 2)!r} is not supported; use one of "
                                  f"{', '.join(repr(t) for t in JSON_TYPES)}")


def _check_json_object(name: str, args: tuple[Node, ...]) -> None:
    if len(args) % 2:
        raise ExpressionError(f"{name}(): takes alternating keys and values, got {len(args)} arguments")
    for i in range(0, len(args), 2):
        key = args[i]
        if isinstance(key, Literal) and not isinstance(key.value, str):
            raise ExpressionError(f"{name}(): key {i // 2 + 1} must be text, got {key.value!r}")


def _check_parse_json(name: str, args: tuple[Node, ...]) -> None:
    """parse_json of a constant that is no JSON is refused up front, as Druid's parser refuses it."""
    if isinstance(args[0], Literal) and isinstance(args[0].value, str):
        try:
            json.loads(args[0].value)
        except ValueError as exc:
            raise ExpressionError(f"{name}(): {args[0].value!r} is not JSON ({exc})") from None


_ARR = Param("array")
ARRAY_FUNCTIONS: dict[str, Function] = {
    "array": Function((), Param("value")),
    "array_length": Function((_ARR,)),
    "array_offset": Function((_ARR, Param("index", _N))),
    "array_ordinal": Function((_ARR, Param("index", _N))),
    "array_contains": Function((_ARR, Param("values"))),
    "array_overlap": Function((_ARR, Param("other"))),
    "scalar_in_array": Function((Param("value"), _ARR)),
    "array_offset_of": Function((_ARR, Param("value"))),
    "array_ordinal_of": Function((_ARR, Param("value"))),
    "array_prepend": Function((Param("value"), _ARR)),
    "array_append": Function((_ARR, Param("value"))),
    "array_concat": Function((_ARR, Param("other"))),
    "array_set_add": Function((_ARR, Param("value"))),
    "array_set_add_all": Function((_ARR, Param("other"))),
    "array_slice": Function((_ARR, Param("start", _N), Param("end", _N, optional=True))),
    "array_to_string": Function((_ARR, Param("delimiter", _S))),
    "string_to_array": Function((Param("s", _S), Param("pattern", _S)), check=_check_split_pattern),
    "array_to_mv": Function((_ARR,)),
}

_LAMBDA = Param("lambda")
APPLY_FUNCTIONS: dict[str, Function] = {
    "map": Function((_LAMBDA, _ARR), check=_check_lambda_count(lambda n: 1)),
    "cartesian_map": Function((_LAMBDA, _ARR), Param("more arrays"), check=_check_lambda_count(lambda n: n - 1)),
    "filter": Function((_LAMBDA, _ARR), check=_check_lambda_count(lambda n: 1)),
    "fold": Function((_LAMBDA, _ARR, Param("accumulator")), check=_check_lambda_count(lambda n: 2)),
    "cartesian_fold": Function((_LAMBDA, _ARR, Param("arrays, then the accumulator")), Param("more"),
                               check=_check_lambda_count(lambda n: n - 1)),
    "any": Function((_LAMBDA, _ARR), check=_check_lambda_count(lambda n: 1)),
    "all": Function((_LAMBDA, _ARR), check=_check_lambda_count(lambda n: 1)),
}

JSON_FUNCTIONS: dict[str, Function] = {
    "json_value": Function((Param("json"), Param("path", _S), Param("type", _S, True, True)),
                           check=_check_json_value),
    "json_query": Function((Param("json"), Param("path", _S)), check=_check_json_path(1)),
    "json_query_array": Function((Param("json"), Param("path", _S)), check=_check_json_path(1)),
    "json_object": Function((Param("key"), Param("value")), Param("more keys and values"),
                            check=_check_json_object),
    "json_keys": Function((Param("json"), Param("path", _S)), check=_check_json_path(1)),
    "json_paths": Function((Param("json"),)),
    "json_merge": Function((Param("json"), Param("other")), Param("more")),
    "parse_json": Function((Param("s", _S),), check=_check_parse_json),
    "try_parse_json": Function((Param("s", _S),)),
    "to_json_string": Function((Param("json"),)),
}

FUNCTIONS.update(ARRAY_FUNCTIONS)
FUNCTIONS.update(APPLY_FUNCTIONS)
FUNCTIONS.update(JSON_FUNCTIONS)


# Druid's implicit apply (math-expr.md: a multi-value column read as a scalar maps the expression over its values)
# needs to know which arguments each function reads as arrays (Druid's getArrayInputs): ARRAY_INPUTS; a JSON
# function takes any value as it is; an apply function's arguments are all rewritten on their own.


def _all(args: tuple[Node, ...]) -> range:
    return range(len(args))


def _first(args: tuple[Node, ...]) -> tuple[int, ...]:
    return (0,)


def _second(args: tuple[Node, ...]) -> tuple[int, ...]:
    return (1,)


def _cast_inputs(args: tuple[Node, ...]) -> tuple[int, ...]:
    """cast to an array type reads its value as an array."""
    return (0,) if str(_constant(args, 1)).upper() in ARRAY_CAST_TYPES else ()


ARRAY_INPUTS: dict[str, Callable[[tuple[Node, ...]], Any]] = {
    "array_length": _first, "array_offset": _first, "array_ordinal": _first, "array_contains": _all,
    "array_overlap": _all, "scalar_in_array": _second, "array_offset_of": _first, "array_ordinal_of": _first,
    "array_prepend": _second, "array_append": _first, "array_concat": _all, "array_set_add": _first,
    "array_set_add_all": _all, "array_slice": _first, "array_to_string": _first, "array_to_mv": _all,
    "cast": _cast_inputs, **{name: _all for name in JSON_FUNCTIONS},
}


def node_columns(node: Node) -> set[str]:
    """Every column name `node` reads (a lambda's parameters among them, where its body uses them)."""
    if isinstance(node, Column):
        return {node.name}
    if isinstance(node, Unary):
        return node_columns(node.operand)
    if isinstance(node, Binary):
        return node_columns(node.left) | node_columns(node.right)
    if isinstance(node, Lambda):
        return node_columns(node.body)
    if isinstance(node, Call):
        return set().union(*(node_columns(a) for a in node.args))
    return set()


def mapped_arguments(node: Call) -> tuple[int, ...]:
    """The arguments of `node` that Druid's implicit apply rewrites on their own (Parser's
    rewriteUnappliedSubExpressions): an expression (not a bare column) where an array function takes an array,
    and every argument of an apply function."""
    if node.name in APPLY_FUNCTIONS:
        return tuple(range(1, len(node.args)))
    if node.name in ARRAY_INPUTS:
        return tuple(i for i in ARRAY_INPUTS[node.name](node.args) if i < len(node.args))
    return ()


def implicit_apply_candidates(root: Node, params: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The columns Druid maps `root` over when they hold multi-value (list) values (Parser.applyUnappliedBindings):
    those read as scalars (an operand, a scalar function's argument) and nowhere as arrays: not as an array
    function's array, nor inside an argument mapped on its own (`mapped_arguments`), nor in a lambda's body (Druid
    lifts those into the apply function). `params`: a lambda's parameters, when `root` is its body."""
    scalar: dict[str, None] = {}  # in the order they appear, the order of a cartesian product
    array: set[str] = set()

    def walk(node: Node) -> None:
        if isinstance(node, Column):
            scalar.setdefault(node.name)
        elif isinstance(node, Unary):
            walk(node.operand)
        elif isinstance(node, Binary):
            walk(node.left)
            walk(node.right)
        elif isinstance(node, Call):
            mapped = mapped_arguments(node)
            for i, arg in enumerate(node.args):
                if i in mapped or isinstance(arg, Lambda):
                    array.update(node_columns(arg))
                else:
                    walk(arg)
    walk(root)
    return tuple(name for name in scalar if name not in array and name not in params)
