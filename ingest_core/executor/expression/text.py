"""Druid's string functions on the executors, vectorized on pyarrow where it has a kernel that agrees with Java
(upper, substring, like...), per value otherwise (`value_functions`: format, lpad, strpos...). Java's rules:
strlen and strpos count UTF-16 units, reverse/left/right/repeat refuse numbers, empty results of repeat and lpad
are null (SQL-compatible mode).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.core.expression.patterns import compile_regex, java_replacement, like_to_regex
from ingest_core.executor import value_functions
from ingest_core.executor.casts import is_arrow, is_text
from ingest_core.executor.expression.vectors import as_text, broadcast, lift, longs, per_value, value_type


def concat(n: int, *args: Any) -> Any:
    return lift(pc.binary_join_element_wise)(*[as_text(a) for a in args], "")


def replace(n: int, s: Any, pattern: str, replacement: str) -> Any:
    if str(pattern) == "":  # Java puts the replacement around every character; pyarrow's kernel never returns
        return per_value(lambda x: x.replace("", str(replacement)), pa.string())(n, as_text(s))
    return lift(lambda x: pc.replace_substring(x, str(pattern), str(replacement)))(as_text(s))


def regexp_extract(n: int, s: Any, pattern: str, index: int = 0) -> Any:
    rx = compile_regex(str(pattern))  # the core checked it and its group
    group = int(index)

    def one(x: str | None) -> str | None:
        if x is None:
            return None
        m = rx.search(x)
        return m.group(group) if m else None
    s = as_text(s)
    if not is_arrow(s):
        return one(s)
    return pa.array([one(x) for x in s.to_pylist()], pa.string())


def like(n: int, s: Any, pattern: str, escape: str | None = None) -> Any:
    rx = like_to_regex(str(pattern), None if escape is None else str(escape))
    return lift(lambda x: pc.match_substring_regex(x, rx))(as_text(s))


def regexp_like(n: int, s: Any, pattern: str) -> Any:
    return lift(lambda x: pc.match_substring_regex(x, str(pattern)))(as_text(s))


def _text_arg(v: Any) -> Any:
    """Druid's string-only functions (reverse, left, right, repeat) refuse numbers."""
    t = value_type(v)
    if not (is_text(t) or pa.types.is_null(t)):
        raise ExpressionError(f"needs a STRING argument but got {t} instead")
    return v


def _long_arg(v: Any) -> Any:
    t = value_type(v)
    if not (pa.types.is_integer(t) or pa.types.is_null(t)):
        raise ExpressionError(f"needs a LONG as second argument but got {t} instead")
    return v


def _null_if_empty(v: Any, n: int) -> Any:
    """Druid's SQL-compatible empty results: text functions give null where they once gave ''."""
    if not is_arrow(v):
        return None if v == "" else v
    return pc.if_else(pc.equal(v, ""), pa.scalar(None, v.type), v)


def substring(n: int, s: Any, index: int, length: int | None = None) -> Any:
    start = int(index)
    stop = None if length is None or int(length) < 0 else start + int(length)
    s = as_text(s)
    sliced = lift(lambda x: pc.utf8_slice_codeunits(x, start, stop if stop is not None else 2**31 - 1))(s)
    past_end = lift(lambda x: pc.less_equal(pc.utf8_length(x), start))(s)  # Druid: null past the end
    if not is_arrow(sliced):
        return None if past_end else sliced
    return pc.if_else(past_end, pa.scalar(None, pa.string()), sliced)


def left(n: int, s: Any, length: Any) -> Any:
    return _slice_side(n, s, length, left=True)


def right(n: int, s: Any, length: Any) -> Any:
    return _slice_side(n, s, length, left=False)


def _slice_side(n: int, s: Any, length: Any, left: bool) -> Any:
    s, length = _text_arg(s), _long_arg(length)
    if is_arrow(length):
        def one(x: str, k: int) -> str:
            if k < 0:
                raise ExpressionError("needs a positive integer as the second argument")
            return x[:k] if left else (x[len(x) - k:] if k < len(x) else x)
        return per_value(one, pa.string())(n, s, length)
    if length is None:
        return broadcast(None, n) if is_arrow(s) else None
    k = int(length)
    if k < 0:
        raise ExpressionError("needs a positive integer as the second argument")
    if left:
        return lift(lambda x: pc.utf8_slice_codeunits(x, 0, k))(s)
    return lift(lambda x: pc.utf8_slice_codeunits(x, -k, 2**31 - 1) if k else pc.utf8_slice_codeunits(x, 0, 0))(s)


def strlen(n: int, s: Any) -> Any:
    # Java counts UTF-16 code units: a character past the BMP is two
    def length(x: Any) -> Any:
        points = pc.cast(pc.utf8_length(x), pa.int64())
        if (pc.max(pc.subtract(pc.cast(pc.binary_length(x), pa.int64()), points)).as_py() or 0) < 3:
            return points  # no text has a 4-byte character (nor even a 3-byte one)
        return pc.add(points, pc.cast(pc.count_substring_regex(x, "[\\x{10000}-\\x{10FFFF}]"), pa.int64()))
    return lift(length)(as_text(s))


def _trim(kind: str) -> Callable[..., Any]:
    fn = {"trim": pc.utf8_trim, "ltrim": pc.utf8_ltrim, "rtrim": pc.utf8_rtrim}[kind]
    strip = {"trim": str.strip, "ltrim": str.lstrip, "rtrim": str.rstrip}[kind]

    def apply(n: int, s: Any, chars: Any = " ") -> Any:  # Druid trims spaces, not all whitespace
        s = as_text(s)
        if is_arrow(chars):  # no characters (null or empty): the text as it is
            return per_value(lambda x, c: strip(x, c) if c and x is not None else x, pa.string(), nulls=False)(
                n, s, chars)
        if chars is None or chars == "":
            return s
        return lift(lambda x: fn(x, characters=str(chars)))(s)
    return apply


def repeat(n: int, s: Any, times: Any) -> Any:
    s, times = _text_arg(s), _long_arg(times)
    sizes = lift(lambda x, k: pc.multiply_checked(pc.cast(pc.utf8_length(x), pa.int64()), k))(s, times)
    longest = (pc.max(sizes).as_py() if is_arrow(sizes) else sizes) or 0
    value_functions.check_length(longest)
    repeated = lift(lambda x, k: pc.binary_repeat(x, pc.max_element_wise(k, 0)))(s, times)
    return _null_if_empty(repeated, n)  # fewer than one time: null, as Druid's SQL-compatible mode


def _pad(left: bool) -> Callable[..., Any]:
    def one(s: Any, length: Any, chars: Any) -> Any:
        if int(length) == 0:
            return None
        return value_functions.pad(value_functions.java_text(s), int(length), value_functions.java_text(chars), left)
    return per_value(one, pa.string())


def _contains(ignore_case: bool) -> Callable[..., Any]:
    def apply(n: int, s: Any, search: str) -> Any:
        s = as_text(s)
        found = lift(lambda x: pc.match_substring(x, str(search), ignore_case=ignore_case))(s)
        return False if found is None else (pc.fill_null(found, False) if is_arrow(found) else found)
    return apply


def regexp_replace(n: int, s: Any, pattern: str, replacement: Any) -> Any:
    rx = compile_regex(str(pattern), re2=False)  # the core checked it
    constant = java_replacement(replacement) if isinstance(replacement, str) else None

    def one(x: str, repl: str) -> str:
        pieces = constant if constant is not None else java_replacement(repl)

        def group(m: re.Match[str]) -> str:
            parts = []
            for p in pieces:
                if isinstance(p, tuple):
                    try:
                        parts.append(m.group(p[0]) or "")
                    except (IndexError, re.error):
                        raise ExpressionError(f"regexp_replace(): no group {p[0]} in {rx.pattern!r}") from None
                else:
                    parts.append(p)
            return "".join(parts)
        return rx.sub(group, x)
    return per_value(one, pa.string())(n, as_text(s), replacement)


def format_(n: int, pattern: Any, *args: Any) -> Any:
    def one(p: Any, *values: Any) -> Any:
        return None if p is None else value_functions.java_format(value_functions.java_text(p), list(values))
    return per_value(one, pa.string(), nulls=False)(n, pattern, *args)


# the registry's implementations (core.expression.functions names them "text.<name>")


def parse_long(n: int, s: Any, radix: Any = 10) -> Any:
    return per_value(value_functions.parse_long, pa.int64())(n, s, radix)


contains_string = _contains(ignore_case=False)
icontains_string = _contains(ignore_case=True)


def strpos(n: int, h: Any, needle: Any, start: Any = 0) -> Any:
    return per_value(value_functions.strpos, pa.int64())(
        n, as_text(h), as_text(needle), 0 if start is None else longs(start)[0])


trim = _trim("trim")
ltrim = _trim("ltrim")
rtrim = _trim("rtrim")


def lower(n: int, s: Any) -> Any:
    return lift(pc.utf8_lower)(as_text(s))


def upper(n: int, s: Any) -> Any:
    return lift(pc.utf8_upper)(as_text(s))


def reverse(n: int, s: Any) -> Any:
    return lift(pc.utf8_reverse)(_text_arg(s))


lpad = _pad(left=True)
rpad = _pad(left=False)


def decode_base64_utf8(n: int, s: Any) -> Any:
    return per_value(value_functions.decode_base64_utf8, pa.string())(n, as_text(s))
