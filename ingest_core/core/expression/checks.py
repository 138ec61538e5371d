"""The checks of constant arguments, one per kind of constant, that registry entries name as their `check`: each
takes (function name, arguments) and raises ExpressionError saying what is wrong and what to write instead.
Regular expressions compile (in the dialect RE2 and Python share), periods and origins parse, cast types, time
units, time zones and timestamp patterns are known, regexp_extract's group exists, subnets are CIDR, format()
conversions are Java's, precisions and radixes are in range, lambdas take as many parameters as arrays."""

from __future__ import annotations

import ipaddress
import json
from typing import Callable

from ingest_core.core.binding import did_you_mean
from ingest_core.core.errors import shown
from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.function import Check
from ingest_core.core.expression.patterns import JAVA_FORMAT, compile_regex, java_replacement, json_path
from ingest_core.core.expression.tree import Lambda, Literal, Node, literal_value
from ingest_core.core.granularity import Granularity
from ingest_core.core.json_path import JsonPathError
from ingest_core.core.periods import Period, PeriodError, parse_datetime
from ingest_core.core.time_formats import joda_to_strptime, joda_tokens, time_zone, timestamp_format_problem


# array types, with Druid's legacy names (LONG_ARRAY ...)
ARRAY_CAST_TYPES = {"ARRAY<LONG>": "LONG", "ARRAY<DOUBLE>": "DOUBLE", "ARRAY<STRING>": "STRING",
                    "LONG_ARRAY": "LONG", "DOUBLE_ARRAY": "DOUBLE", "STRING_ARRAY": "STRING"}
CAST_TYPES = ("LONG", "DOUBLE", "FLOAT", "STRING", *ARRAY_CAST_TYPES)
TIME_UNITS = ("EPOCH", "MICROSECOND", "MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "DOW", "ISODOW", "DOY", "WEEK",
              "MONTH", "QUARTER", "YEAR", "ISOYEAR", "DECADE", "CENTURY", "MILLENNIUM")


JSON_TYPES = ("LONG", "DOUBLE", "STRING", "ARRAY<LONG>", "ARRAY<DOUBLE>", "ARRAY<STRING>")


def cast_type(name: str, args: tuple[Node, ...]) -> None:
    to = str(literal_value(args, 1)).upper()
    if to not in CAST_TYPES:
        raise ExpressionError(f"cast to {literal_value(args, 1)!r} is not supported{did_you_mean(to, CAST_TYPES)}; "
                              f"use one of {', '.join(repr(t) for t in CAST_TYPES)}")


def regex_group(name: str, args: tuple[Node, ...]) -> None:
    rx = compile_regex(str(literal_value(args, 1)))
    group = literal_value(args, 2)
    if group is not None and not (isinstance(group, int) and 0 <= group <= rx.groups):
        raise ExpressionError(f"regexp_extract(): group {group!r} does not exist: the pattern "
                              f"{rx.pattern!r} has {rx.groups} group{'s' if rx.groups != 1 else ''} "
                              f"(0 is the whole match)")


def regex(name: str, args: tuple[Node, ...]) -> None:
    compile_regex(str(literal_value(args, 1)))


def like_escape(name: str, args: tuple[Node, ...]) -> None:
    escape = literal_value(args, 2)
    if escape is not None and len(str(escape)) != 1:
        raise ExpressionError(f"like(): the escape must be one character, got {shown(escape)}")


def period(name: str, args: tuple[Node, ...]) -> None:
    text = str(literal_value(args, 1))
    try:
        parsed = Period.parse(text)
        if name != "timestamp_shift":
            Granularity(text, parsed).floor_unit()
            if parsed.negative or parsed.is_zero:
                raise ValueError("it must be positive")
    except (PeriodError, ValueError) as exc:
        verb = {"timestamp_shift": "shift by", "timestamp_ceil": "round up to"}.get(name, "floor to")
        raise ExpressionError(f"{name}(): {shown(text)} is not a period to {verb} ({exc}); write an ISO-8601 period "
                              "such as 'PT1H' or 'P1D'") from None
    if name in ("timestamp_floor", "timestamp_ceil"):
        origin(name, args)
        zone_at(3)(name, args)
    elif name == "timestamp_shift":
        zone_at(3)(name, args)


def origin(name: str, args: tuple[Node, ...]) -> None:
    when = literal_value(args, 2)
    if isinstance(when, str) and when:
        try:
            parse_datetime(when)
        except PeriodError as exc:
            raise ExpressionError(f"{name}(): the origin {exc}") from None


def zone_at(index: int) -> Check:
    def check(name: str, args: tuple[Node, ...]) -> None:
        zone = literal_value(args, index)
        if zone is not None:
            try:
                time_zone(str(zone))
            except ValueError as exc:
                raise ExpressionError(f"{name}(): {exc}") from None
    return check


def time_unit(name: str, args: tuple[Node, ...]) -> None:
    unit = str(literal_value(args, 1)).upper()
    if unit not in TIME_UNITS:
        raise ExpressionError(f"timestamp_extract(): unit {literal_value(args, 1)!r} is not supported; use one of "
                              f"{', '.join(TIME_UNITS)}")
    zone_at(2)(name, args)


def timestamp_format(name: str, args: tuple[Node, ...]) -> None:
    fmt = literal_value(args, 1)
    problem = timestamp_format_problem(str(fmt)) if fmt is not None else None
    if fmt is not None and name == "timestamp_parse" and not problem:  # Joda-Time patterns only, as Druid
        try:
            joda_to_strptime(str(fmt))
        except ValueError as exc:
            problem = f"{exc}; timestamp_parse takes a Joda-Time pattern (or none for ISO-8601 and SQL times)"
    if problem:
        raise ExpressionError(f"{name}(): {problem}")
    zone_at(2)(name, args)


def print_pattern(name: str, args: tuple[Node, ...]) -> None:
    fmt = literal_value(args, 1)
    if fmt is not None:
        try:
            joda_tokens(str(fmt))
        except ValueError as exc:
            raise ExpressionError(f"{name}(): {exc}") from None
    zone_at(2)(name, args)


def whole_numbers(*indexes: int) -> Check:
    def check(name: str, args: tuple[Node, ...]) -> None:
        for i in indexes:
            if i < len(args) and isinstance(args[i], Literal) and not isinstance(literal_value(args, i), int):
                raise ExpressionError(f"{name}(): argument {i + 1} must be a whole number, got "
                                      f"{literal_value(args, i)!r}")
    return check


def in_range(index: int, low: int, high: int) -> Check:
    def check(name: str, args: tuple[Node, ...]) -> None:
        whole_numbers(index)(name, args)
        value = literal_value(args, index)
        if isinstance(value, int) and not low <= value <= high:
            raise ExpressionError(f"{name}(): argument {index + 1} must be from {low} to {high}, got {value}")
    return check


def substring(name: str, args: tuple[Node, ...]) -> None:
    in_range(1, 0, 2 ** 31 - 1)(name, args)  # Java's substring throws for a negative index
    whole_numbers(2)(name, args)


def subnet(name: str, args: tuple[Node, ...]) -> None:
    subnet = str(literal_value(args, 1))
    version = 6 if name == "ipv6_match" else 4
    try:
        network = ipaddress.ip_network(subnet, strict=False)
        if network.version != version or "/" not in subnet:
            raise ValueError
    except ValueError:
        example = "'75e9:efa4:29c6:85f6::/64'" if version == 6 else "'192.168.0.0/16'"
        raise ExpressionError(f"{name}(): {subnet!r} is not an IPv{version} subnet in CIDR notation (such as "
                              f"{example})") from None


def java_format(name: str, args: tuple[Node, ...]) -> None:
    pattern = literal_value(args, 0)
    if isinstance(pattern, str):
        for m in JAVA_FORMAT.finditer(pattern):
            if m.group("conv") is None:
                raise ExpressionError(f"format(): {m.group(0)!r} in {pattern!r} is not a conversion this format "
                                      f"supports; use %s %d %x %X %o %f %e %E %b %c %n %% (with flags, width and "
                                      "precision)")


def text_constant(index: int) -> Check:
    def check(name: str, args: tuple[Node, ...]) -> None:
        if not isinstance(literal_value(args, index), str):
            raise ExpressionError(f"{name}(): argument {index + 1} must be a text constant ('...')")
    return check


def regex_replace(name: str, args: tuple[Node, ...]) -> None:
    rx = compile_regex(str(literal_value(args, 1)), re2=False)  # run by Python's re only
    replacement = literal_value(args, 2)
    if isinstance(replacement, str):
        for piece in java_replacement(replacement):
            if isinstance(piece, tuple) and not (piece[0] in rx.groupindex or
                                                 isinstance(piece[0], int) and piece[0] <= rx.groups):
                raise ExpressionError(f"regexp_replace(): the replacement {replacement!r} refers to group "
                                      f"{piece[0]!r}, which {rx.pattern!r} does not have")


def lambda_count(arrays: Callable[[int], int]) -> Check:
    """An apply function's first argument is a lambda taking `arrays(argument count)` parameters."""
    def check(name: str, args: tuple[Node, ...]) -> None:
        if not isinstance(args[0], Lambda):
            raise ExpressionError(f"{name}(): argument 1 must be a lambda, such as (x) -> x + 1")
        wanted = arrays(len(args))
        if len(args[0].params) != wanted:
            raise ExpressionError(f"{name}(): lambda expression argument count of {len(args[0].params)} does not "
                                  f"match the {wanted} arguments passed to it")
    return check


def split_pattern(name: str, args: tuple[Node, ...]) -> None:
    if isinstance(args[1], Literal) and args[1].value is not None:
        compile_regex(str(args[1].value))


def json_path_at(index: int) -> Check:
    def check(name: str, args: tuple[Node, ...]) -> None:
        path = literal_value(args, index)
        if path is not None:
            try:
                json_path(str(path))
            except JsonPathError as exc:
                raise ExpressionError(f"{name}(): {exc}") from None
    return check


def json_value(name: str, args: tuple[Node, ...]) -> None:
    json_path_at(1)(name, args)
    if len(args) > 2:
        to = str(literal_value(args, 2)).upper()
        if to not in JSON_TYPES:
            raise ExpressionError(f"{name}(): returning type {literal_value(args, 2)!r} is not supported; use one of "
                                  f"{', '.join(repr(t) for t in JSON_TYPES)}")


def json_object(name: str, args: tuple[Node, ...]) -> None:
    if len(args) % 2:
        raise ExpressionError(f"{name}(): takes alternating keys and values, got {len(args)} arguments")
    for i in range(0, len(args), 2):
        key = args[i]
        if isinstance(key, Literal) and not isinstance(key.value, str):
            raise ExpressionError(f"{name}(): key {i // 2 + 1} must be text, got {key.value!r}")


def parse_json(name: str, args: tuple[Node, ...]) -> None:
    """parse_json of a constant that is no JSON is refused up front, as Druid's parser refuses it."""
    if isinstance(args[0], Literal) and isinstance(args[0].value, str):
        try:
            json.loads(args[0].value)
        except ValueError as exc:
            raise ExpressionError(f"{name}(): {args[0].value!r} is not JSON ({exc})") from None
