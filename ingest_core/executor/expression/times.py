"""Druid expressions on the executors: the checked tree of `ingest_core.core.expressions` compiled to vectorized
pyarrow compute functions over a chunk's columns.

A compiled expression maps (columns, row count) to a pyarrow array or a Python scalar (a constant). Druid's
rules: numeric operators read text as a number (null when it is not one), math functions as Druid's
Function.java types them (`_math_args`); `+` with text concatenates; long arithmetic that leaves the long
range, long division by zero, a cast that cannot hold the value and a function Druid throws in are errors
(`ExpressionError`), which the row parser turns into that row's parse exception. Doubles follow IEEE
(x / 0.0 is infinite); `safe_divide` gives null instead. Functions pyarrow has no kernel for run per value
(`_per_value` over `value_functions`), or on numpy.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.expressions import (
    ARRAY_CAST_TYPES,
    ArrayLiteral,
    Binary,
    Call,
    Column,
    Expression,
    ExpressionError,
    Lambda,
    Literal,
    Node,
    Unary,
    compile_regex,
    java_replacement,
    like_to_regex,
    parse_expression,
)
from ingest_core.core.granularity import Granularity
from ingest_core.core.periods import Period, parse_datetime
from ingest_core.core.time_formats import joda_to_strptime, joda_tokens, time_zone
from ingest_core.executor import buckets, value_functions
from ingest_core.executor.array_functions import (
    APPLY_COMPILERS,
    ARRAY_IMPLEMENTATIONS,
    cast_to_array,
    compile_arguments,
    compile_array_literal,
    with_implicit_apply,
)
from ingest_core.executor.casts import LONG_MAX, is_arrow, is_text, to_double, to_long
from ingest_core.executor.expr_values import scalar_view
from ingest_core.executor.json_functions import JSON_IMPLEMENTATIONS
from ingest_core.executor.timestamps import parse_iso, timestamp_parser

Columns = Mapping[str, pa.Array]
Compiled = Callable[[Columns, int], Any]  # (columns, row count) -> pa.Array or a Python scalar



# ------------------------------------------------------------------------------------ value helpers


def _arr(v: Any, n: int) -> pa.Array:
    if isinstance(v, (pa.Array, pa.ChunkedArray)):
        return v
    return pa.array([v] * n) if v is not None else pa.nulls(n)


def _lift(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Apply a pyarrow compute function to arrays or Python scalars."""
    def call(*args: Any) -> Any:
        if not any(is_arrow(a) for a in args):
            if any(a is None for a in args):
                return None
            return fn(*[pa.scalar(a) for a in args]).as_py()
        return fn(*[a if is_arrow(a) else (pa.scalar(a) if a is not None else pa.scalar(None, pa.null())) for a in args])
    return call


def _type_of(v: Any) -> pa.DataType:
    if is_arrow(v):
        return v.type
    if isinstance(v, bool):
        return pa.bool_()
    if isinstance(v, int):
        return pa.int64()
    if isinstance(v, float):
        return pa.float64()
    if v is None:
        return pa.null()
    return pa.string()


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _as_bool(v: Any, n: int) -> Any:
    t = _type_of(v)
    if pa.types.is_boolean(t):
        return v
    if _is_number(t):
        return _lift(pc.greater)(v, 0)
    if is_text(t):
        return _lift(pc.equal)(_lift(pc.utf8_lower)(v), "true")
    if pa.types.is_null(t):
        return v
    raise ExpressionError(f"cannot use a value of type {t} as a condition")


def _as_long(v: Any) -> Any:
    t = _type_of(v)
    if pa.types.is_boolean(t):
        return int(v) if not is_arrow(v) else pc.cast(v, pa.int64())
    return v


def _numeric(v: Any) -> Any:
    """A value for a numeric operator: text read as a number (null when it is not one), as Druid does."""
    v = _as_long(v)
    return to_double(v) if is_text(_type_of(v)) else v


def _to_string(v: Any) -> Any:
    """A value as Druid's asString: doubles as Java's Double.toString ('1.0', '1.0E7', 'NaN')."""
    if not is_arrow(v):
        if isinstance(v, float):
            return value_functions.java_double(v)
        return None if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
    if pa.types.is_string(v.type):
        return v
    if not pa.types.is_floating(v.type):
        return pc.cast(v, pa.string())
    v = pc.cast(v, pa.float64())
    text = pc.cast(v, pa.string())
    magnitude = pc.abs(v)
    plain = pc.or_(pc.and_(pc.greater_equal(magnitude, 1e-3), pc.less(magnitude, 1e7)), pc.equal(v, 0.0))
    text = pc.if_else(pc.and_(plain, pc.equal(v, pc.trunc(v))), pc.binary_join_element_wise(text, ".0", ""), text)
    other = pc.fill_null(pc.invert(plain), False)  # exponents, NaN, infinities: Java's own spelling, per value
    if pc.any(other).as_py():
        rows = np.flatnonzero(other.to_numpy(zero_copy_only=False))
        values = text.to_pylist()
        for row, x in zip(rows, v.take(pa.array(rows)).to_pylist()):
            values[row] = value_functions.java_double(x)
        text = pa.array(values, pa.string())
    return text


_CHECKED = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}


def _arith(name: str) -> Callable[[Any, Any], Any]:
    def op(a: Any, b: Any) -> Any:
        a, b = _as_long(a), _as_long(b)
        if name == "+" and (is_text(_type_of(a)) or is_text(_type_of(b))):
            return _lift(pc.binary_join_element_wise)(_to_string(a), _to_string(b), "")
        a, b = _numeric(a), _numeric(b)
        ta, tb = _type_of(a), _type_of(b)
        longs = pa.types.is_integer(ta) and pa.types.is_integer(tb)
        if name in ("/", "%") and longs:
            _no_zero_divisor(b)
            q = _lift(pc.divide)(a, b)  # integer division truncates toward zero, as in Java
            return q if name == "/" else _lift(pc.subtract)(a, _lift(pc.multiply)(q, b))  # sign of the dividend
        if name == "%":
            a, b = to_double(a), to_double(b)
            q = _lift(pc.trunc)(_lift(pc.divide)(a, b))
            return _lift(pc.subtract)(a, _lift(pc.multiply)(q, b))
        if name == "/":
            return _lift(pc.divide)(to_double(a) if not longs and pa.types.is_integer(ta) else a,
                                    to_double(b) if not longs and pa.types.is_integer(tb) else b)
        if name == "^":
            return _lift(pc.power)(to_double(a), to_double(b))
        return _lift(_CHECKED[name] if longs else {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[name])(a, b)
    return op


def _no_zero_divisor(b: Any) -> None:
    if (b == 0) if not is_arrow(b) else (pc.any(pc.equal(b, 0)).as_py() or False):
        raise ExpressionError("long division by zero")


def _compare(name: str) -> Callable[[Any, Any], Any]:
    fn = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal,
          "==": pc.equal, "!=": pc.not_equal}[name]

    def op(a: Any, b: Any) -> Any:
        a, b = _as_long(a), _as_long(b)
        ta, tb = _type_of(a), _type_of(b)
        if _is_number(ta) != _is_number(tb) and not (pa.types.is_null(ta) or pa.types.is_null(tb)):
            a, b = to_double(a), to_double(b)
        return _lift(fn)(a, b)
    return op


def _logic(name: str) -> Callable[[Any, Any], Any]:
    fn = pc.or_kleene if name == "||" else pc.and_kleene
    return lambda a, b: _as_long(_lift(fn)(_as_bool(a, 0), _as_bool(b, 0)))


# ------------------------------------------------------------------------------------ functions


def _f_concat(n: int, *args: Any) -> Any:
    return _lift(pc.binary_join_element_wise)(*[_to_string(a) for a in args], "")


def _f_replace(n: int, s: Any, pattern: str, replacement: str) -> Any:
    if str(pattern) == "":  # Java puts the replacement around every character; pyarrow's kernel never returns
        return _per_value(lambda x: x.replace("", str(replacement)), pa.string())(n, _to_string(s))
    return _lift(lambda x: pc.replace_substring(x, str(pattern), str(replacement)))(_to_string(s))


def _f_nvl(n: int, a: Any, b: Any) -> Any:
    if not is_arrow(a) and not is_arrow(b):
        return b if a is None else a
    a, b = _unify(a, b, n)
    return pc.coalesce(a, b)


def _f_if(n: int, cond: Any, a: Any, b: Any) -> Any:
    c = _as_bool(cond, n)
    if not is_arrow(c) and not is_arrow(a) and not is_arrow(b):
        return a if c else b
    a, b = _unify(a, b, n)
    return pc.if_else(pc.fill_null(_arr(c, n), False), a, b)


def _unify(a: Any, b: Any, n: int) -> tuple[pa.Array, pa.Array]:
    """Two values as arrays of one type: text if either is text, else double if they differ."""
    ta, tb = _type_of(a), _type_of(b)
    if ta != tb and not pa.types.is_null(ta) and not pa.types.is_null(tb):
        if is_text(ta) or is_text(tb):
            a, b = _to_string(a), _to_string(b)
        else:
            a, b = to_double(a), to_double(b)
    aa, bb = _arr(a, n), _arr(b, n)
    if pa.types.is_null(aa.type):
        aa = pa.nulls(n, bb.type)
    if pa.types.is_null(bb.type):
        bb = pa.nulls(n, aa.type)
    return aa, bb


def _f_case_searched(n: int, *args: Any) -> Any:
    otherwise = args[-1] if len(args) % 2 == 1 else None
    pairs = list(zip(args[0:len(args) - (len(args) % 2):2], args[1::2]))
    result = otherwise
    for cond, value in reversed(pairs):
        result = _f_if(n, cond, value, result)
    return result


def _f_cast(n: int, v: Any, to: str) -> Any:
    kind = str(to).upper()
    if kind in ARRAY_CAST_TYPES:
        return cast_to_array(n, v, ARRAY_CAST_TYPES[kind])
    v = scalar_view(v)
    if kind == "LONG":
        return to_long(v)
    if kind in ("DOUBLE", "FLOAT"):
        return to_double(v)
    return _to_string(v)  # STRING: the core checked the type


def _f_regexp_extract(n: int, s: Any, pattern: str, index: int = 0) -> Any:
    rx = compile_regex(str(pattern))  # the core checked it and its group
    group = int(index)

    def one(x: str | None) -> str | None:
        if x is None:
            return None
        m = rx.search(x)
        return m.group(group) if m else None
    s = _to_string(s)
    if not is_arrow(s):
        return one(s)
    return pa.array([one(x) for x in s.to_pylist()], pa.string())


def _f_like(n: int, s: Any, pattern: str, escape: str | None = None) -> Any:
    rx = like_to_regex(str(pattern), None if escape is None else str(escape))
    return _lift(lambda x: pc.match_substring_regex(x, rx))(_to_string(s))


def _f_regexp_like(n: int, s: Any, pattern: str) -> Any:
    return _lift(lambda x: pc.match_substring_regex(x, str(pattern)))(_to_string(s))


def _unary_math(fn: Callable[..., Any], keep_longs: bool) -> Callable[..., Any]:
    def apply(n: int, x: Any) -> Any:
        x = _numeric(x)
        if keep_longs and pa.types.is_integer(_type_of(x)):
            return x
        return _lift(fn)(x)
    return apply


def _extreme(fn: Callable[..., Any]) -> Callable[..., Any]:
    """greatest/least: numbers compare as numbers (double if they mix long and double), anything with text
    compares as text, as Druid's; nulls are skipped."""
    def apply(n: int, *args: Any) -> Any:
        args = tuple(a for a in args if a is not None)  # a null constant is skipped like a null row
        if not args:
            return None
        types = [_type_of(a) for a in args]
        if any(is_text(t) for t in types):
            args = tuple(_to_string(a) for a in args)
        elif any(pa.types.is_floating(t) for t in types):
            args = tuple(to_double(a) for a in args)
        return _lift(fn)(*args)
    return apply


def _f_isnull(n: int, x: Any) -> Any:
    return (x is None) if not is_arrow(x) else pc.is_null(x)


def _f_notnull(n: int, x: Any) -> Any:
    return (x is not None) if not is_arrow(x) else pc.is_valid(x)


# ------------------------------------------------------------------------------------ running functions


def _per_value(fn: Callable[..., Any], out_type: pa.DataType, nulls: bool = True) -> Callable[..., Any]:
    """A function of Python values applied to each row (arrays or constants in, an array out); with `nulls`, a
    row with a null argument is null without calling it. It raises ExpressionError for a row it cannot take,
    which fails that row only (the row parser finds it)."""
    def apply(n: int, *args: Any) -> Any:
        if not any(is_arrow(a) for a in args):
            return None if nulls and any(a is None for a in args) else fn(*args)
        columns = [a.to_pylist() if is_arrow(a) else [a] * n for a in args]
        out = [None if nulls and any(v is None for v in row) else fn(*row) for row in zip(*columns)]
        return pa.array(out, out_type)
    return apply


def _numpy(fn: Callable[..., Any], args: list[Any], n: int, out_type: pa.DataType) -> Any:
    """`fn` over numpy arrays of the arguments (numbers of one kind each, nulls masked), vectorized."""
    if not any(is_arrow(a) for a in args):
        if any(a is None for a in args):
            return None
        with np.errstate(all="ignore"):
            value = fn(*[np.asarray([a]) for a in args])[0]
        return value.item()
    mask = None
    values = []
    for a in args:
        if a is None:
            return pa.nulls(n, out_type)
        if is_arrow(a):
            a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
            if a.null_count:
                nulls = pc.is_null(a).to_numpy(zero_copy_only=False)
                mask = nulls if mask is None else mask | nulls
                a = pc.fill_null(a, pa.scalar(0, a.type))
            values.append(a.to_numpy(zero_copy_only=False))
        else:
            values.append(np.asarray(a))
    with np.errstate(all="ignore"):
        result = np.broadcast_to(fn(*values), (n,))
    return pa.array(result, out_type, mask=mask)


def _math_args(*args: Any) -> list[Any]:
    """Druid's math functions' arguments: a lone argument that is text is null (UnivariateMathFunction, even
    '3'); of two, both text give null and one text is read as a number (BivariateMathFunction's autoDetect)."""
    args = tuple(_as_long(a) for a in args)
    texts = [is_text(_type_of(a)) for a in args]
    if all(texts):
        return [None] * len(args)
    return [to_double(a) if text else a for a, text in zip(args, texts)]


def _number_only(v: Any) -> Any:
    """round's and the size formats' first argument: a number; text is null, or an error when it holds a
    number (Druid: 'first argument should be a LONG or DOUBLE but got STRING')."""
    v = _as_long(v)
    if not is_text(_type_of(v)):
        return v
    numbers = to_double(v)
    if (numbers is not None) if not is_arrow(numbers) else numbers.null_count < len(numbers):
        raise ExpressionError("first argument should be a LONG or DOUBLE but got STRING instead")
    return None


def _doubles(*args: Any) -> list[Any]:
    return [to_double(a) for a in _math_args(*args)]


def _double_math(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Druid's Double(Uni|Bi)variateMathFunction: the arguments as doubles (text as `_math_args` says), a double
    out."""
    return lambda n, *args: _numpy(fn, _doubles(*args), n, pa.float64())


def _java_long(d: Any, checked: bool = False) -> Any:
    """Java's (long) cast of doubles: toward zero, NaN as 0, saturated at the long range (an error instead when
    `checked`, as Druid's UnivariateMathFunction does for a double past the long range)."""
    d = np.asarray(d, dtype=np.float64)
    if checked and np.any((d < -2.0 ** 63) | (d > 2.0 ** 63)):
        raise ExpressionError("possible data truncation: the value is out of the LONG range")
    out = np.where(np.isnan(d), 0.0, np.trunc(d))
    result = np.clip(out, -2.0 ** 63, 2.0 ** 63 - 1024).astype(np.int64)  # the largest double below 2**63
    return np.where(out >= 2.0 ** 63, LONG_MAX, result)


def _longs(*args: Any, checked: bool = False) -> list[Any]:
    """Arguments as longs: doubles cast as Java casts them, text read as a number first."""
    out = []
    for a in args:
        a = _numeric(a)
        if pa.types.is_floating(_type_of(a)):
            if is_arrow(a):
                a = a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a
                a = pa.array(_java_long(pc.fill_null(a, 0.0).to_numpy(zero_copy_only=False), checked), pa.int64(),
                             mask=pc.is_null(a).to_numpy(zero_copy_only=False) if a.null_count else None)
            else:
                a = int(_java_long(a, checked))
        out.append(a)
    return out


def _long_math(fn: Callable[..., Any], checked: bool = False) -> Callable[..., Any]:
    return lambda n, *args: _numpy(fn, _longs(*_math_args(*args), checked=checked), n, pa.int64())


def _both_longs(x: Any, y: Any) -> bool:
    return pa.types.is_integer(_type_of(x)) and pa.types.is_integer(_type_of(y))


def _typed_math(long_fn: Callable[..., Any], double_fn: Callable[..., Any]) -> Callable[..., Any]:
    """Druid's BivariateMathFunction: two longs give a long, anything else doubles."""
    def apply(n: int, x: Any, y: Any) -> Any:
        x, y = _math_args(x, y)
        if _both_longs(x, y):
            return _numpy(long_fn, [x, y], n, pa.int64())
        return _numpy(double_fn, _doubles(x, y), n, pa.float64() if double_fn is not _div_doubles else pa.int64())
    return apply


def _scalb(d: Any, sf: Any) -> list[Any]:
    d, sf = _math_args(d, sf)
    return [to_double(d), _longs(sf)[0]]


def _get_exponent(x: Any) -> Any:
    exponent = np.frexp(x)[1].astype(np.int64) - 1
    exponent = np.where(np.abs(x) < 2.2250738585072014e-308, -1023, exponent)  # zero and subnormals
    return np.where(np.isfinite(x), exponent, 1024)


def _ulp(x: Any) -> Any:
    a = np.abs(x)
    exponent = _get_exponent(a)
    size = np.where(exponent < -1022, 5e-324, np.ldexp(1.0, np.clip(exponent - 52, -1074, 971).astype(np.int32)))
    return np.where(np.isinf(a), np.inf, np.where(np.isnan(a), np.nan, size))


def _pow(x: Any, y: Any) -> Any:
    # Java: a NaN exponent gives NaN (C gives 1 for 1**NaN), and so does (+-1)**infinity
    out = np.power(x, y)
    return np.where(np.isnan(y) | ((np.abs(x) == 1) & np.isinf(y)), np.nan, out)


def _ieee_remainder(x: float, y: float) -> float:
    try:
        return math.remainder(x, y)
    except ValueError:  # Java gives NaN for x infinite or y zero
        return math.nan


def _div_longs(x: Any, y: Any) -> Any:
    if np.any(y == 0):
        raise ExpressionError("long division by zero")
    q = np.abs(x) // np.abs(np.where(y == 0, 1, y))
    return np.where((x < 0) != (y < 0), -q, q)  # toward zero, as Java


def _div_doubles(x: Any, y: Any) -> Any:
    return _java_long(np.asarray(x, dtype=np.float64) / y)


def _f_safe_divide(n: int, x: Any, y: Any) -> Any:
    """x / y, or null when y is 0; for doubles 0 / 0 (or NaN) is 0, as Druid's SafeDivide."""
    x, y = _math_args(x, y)
    if _both_longs(x, y):
        def longs(a: Any, b: Any) -> Any:
            return _div_longs(a, np.where(b == 0, 1, b))
        quotient = _numpy(longs, [x, y], n, pa.int64())
        kind, zero = pa.int64(), 0
    else:
        x, y = _doubles(x, y)
        quotient = _numpy(lambda a, b: a / np.where(b == 0, 1, b), [x, y], n, pa.float64())
        kind, zero = pa.float64(), 0.0
    undefined = _lift(pc.or_)(_lift(pc.equal)(y, 0), _lift(pc.is_nan)(y) if kind == pa.float64() else False)
    if not is_arrow(undefined) and not is_arrow(quotient) and not is_arrow(x):
        if undefined is None or quotient is None:
            return None
        return quotient if not undefined else (zero if x == 0 and kind == pa.float64() else None)
    undefined = pc.fill_null(_arr(undefined, n), False)
    x_zero = pc.fill_null(_arr(_lift(pc.equal)(x, 0), n), False) if kind == pa.float64() else pa.repeat(False, n)
    return pc.if_else(undefined, pc.if_else(x_zero, pa.scalar(zero, kind), pa.scalar(None, kind)), _arr(quotient, n))


def _f_round(n: int, x: Any, scale: int = 0) -> Any:
    """BigDecimal's HALF_UP on the value's shortest decimal form (halves away from zero); a long stays a long,
    NaN is 0 and infinities the largest finite doubles, as Druid's round."""
    x, digits = _number_only(x), int(scale)
    if pa.types.is_integer(_type_of(x)):
        if digits >= 0:
            return x
        return _lift(lambda v: pc.round(v, digits, round_mode="half_towards_infinity"))(x)
    x = to_double(x)
    if not is_arrow(x):
        return None if x is None else _round_one(x, digits)
    x = pc.if_else(pc.is_nan(x), 0.0, x)
    x = pc.if_else(pc.is_inf(x), pc.multiply(pc.sign(x), 1.7976931348623157e308), x)
    scaled = pc.multiply(pc.abs(x), 10.0 ** digits)
    huge = pc.greater(scaled, 1e300)  # pyarrow's round overflows there: rounded in decimal below
    rounded = pc.round(pc.if_else(huge, 0.0, x), digits, round_mode="half_towards_infinity")
    # binary doubles sit just off a half (2.675 is 2.67499...): those rows are rounded in decimal, as Java does
    near_half = pc.or_(huge, pc.less(pc.abs(pc.subtract(pc.subtract(scaled, pc.floor(scaled)), 0.5)), 1e-6))
    if pc.any(near_half).as_py():
        rows = np.flatnonzero(pc.fill_null(near_half, False).to_numpy(zero_copy_only=False))
        values = rounded.to_numpy(zero_copy_only=False).copy()
        values[rows] = [_round_one(v, digits) for v in x.take(pa.array(rows)).to_pylist()]
        rounded = pa.array(values, pa.float64(), mask=pc.is_null(x).to_numpy(zero_copy_only=False))
    return rounded


def _round_one(v: float, digits: int) -> float:
    if math.isnan(v):
        return 0.0
    if math.isinf(v):
        return math.copysign(1.7976931348623157e308, v)
    return float(Decimal(repr(v)).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


# ------------------------------------------------------------------------------------ conditional


def _f_coalesce(n: int, *args: Any) -> Any:
    result = args[-1]
    for value in reversed(args[:-1]):
        result = _f_nvl(n, value, result)
    return result


def _f_case_simple(n: int, value: Any, *args: Any) -> Any:
    equal = _compare("==")
    pairs = [item for i in range(0, len(args) - 1, 2) for item in (equal(value, args[i]), args[i + 1])]
    return _f_case_searched(n, *pairs, *(args[-1:] if len(args) % 2 == 1 else ()))


# ------------------------------------------------------------------------------------ text


def _text_arg(v: Any) -> Any:
    """Druid's string-only functions (reverse, left, right, repeat) refuse numbers."""
    t = _type_of(v)
    if not (is_text(t) or pa.types.is_null(t)):
        raise ExpressionError(f"needs a STRING argument but got {t} instead")
    return v


def _long_arg(v: Any) -> Any:
    t = _type_of(v)
    if not (pa.types.is_integer(t) or pa.types.is_null(t)):
        raise ExpressionError(f"needs a LONG as second argument but got {t} instead")
    return v


def _null_if_empty(v: Any, n: int) -> Any:
    """Druid's SQL-compatible empty results: text functions give null where they once gave ''."""
    if not is_arrow(v):
        return None if v == "" else v
    return pc.if_else(pc.equal(v, ""), pa.scalar(None, v.type), v)


def _f_substring(n: int, s: Any, index: int, length: int | None = None) -> Any:
    start = int(index)
    stop = None if length is None or int(length) < 0 else start + int(length)
    s = _to_string(s)
    sliced = _lift(lambda x: pc.utf8_slice_codeunits(x, start, stop if stop is not None else 2**31 - 1))(s)
    past_end = _lift(lambda x: pc.less_equal(pc.utf8_length(x), start))(s)  # Druid: null past the end
    if not is_arrow(sliced):
        return None if past_end else sliced
    return pc.if_else(past_end, pa.scalar(None, pa.string()), sliced)


def _f_left(n: int, s: Any, length: Any) -> Any:
    return _slice_side(n, s, length, left=True)


def _f_right(n: int, s: Any, length: Any) -> Any:
    return _slice_side(n, s, length, left=False)


def _slice_side(n: int, s: Any, length: Any, left: bool) -> Any:
    s, length = _text_arg(s), _long_arg(length)
    if is_arrow(length):
        def one(x: str, k: int) -> str:
            if k < 0:
                raise ExpressionError("needs a positive integer as the second argument")
            return x[:k] if left else (x[len(x) - k:] if k < len(x) else x)
        return _per_value(one, pa.string())(n, s, length)
    if length is None:
        return _arr(None, n) if is_arrow(s) else None
    k = int(length)
    if k < 0:
        raise ExpressionError("needs a positive integer as the second argument")
    if left:
        return _lift(lambda x: pc.utf8_slice_codeunits(x, 0, k))(s)
    return _lift(lambda x: pc.utf8_slice_codeunits(x, -k, 2**31 - 1) if k else pc.utf8_slice_codeunits(x, 0, 0))(s)


def _f_strlen(n: int, s: Any) -> Any:
    # Java counts UTF-16 code units: a character past the BMP is two
    def length(x: Any) -> Any:
        points = pc.cast(pc.utf8_length(x), pa.int64())
        if (pc.max(pc.subtract(pc.cast(pc.binary_length(x), pa.int64()), points)).as_py() or 0) < 3:
            return points  # no text has a 4-byte character (nor even a 3-byte one)
        return pc.add(points, pc.cast(pc.count_substring_regex(x, "[\\x{10000}-\\x{10FFFF}]"), pa.int64()))
    return _lift(length)(_to_string(s))


def _trim(kind: str) -> Callable[..., Any]:
    fn = {"trim": pc.utf8_trim, "ltrim": pc.utf8_ltrim, "rtrim": pc.utf8_rtrim}[kind]
    strip = {"trim": str.strip, "ltrim": str.lstrip, "rtrim": str.rstrip}[kind]

    def apply(n: int, s: Any, chars: Any = " ") -> Any:  # Druid trims spaces, not all whitespace
        s = _to_string(s)
        if is_arrow(chars):  # no characters (null or empty): the text as it is
            return _per_value(lambda x, c: strip(x, c) if c and x is not None else x, pa.string(), nulls=False)(
                n, s, chars)
        if chars is None or chars == "":
            return s
        return _lift(lambda x: fn(x, characters=str(chars)))(s)
    return apply


def _f_repeat(n: int, s: Any, times: Any) -> Any:
    s, times = _text_arg(s), _long_arg(times)
    sizes = _lift(lambda x, k: pc.multiply_checked(pc.cast(pc.utf8_length(x), pa.int64()), k))(s, times)
    longest = (pc.max(sizes).as_py() if is_arrow(sizes) else sizes) or 0
    value_functions.check_length(longest)
    repeated = _lift(lambda x, k: pc.binary_repeat(x, pc.max_element_wise(k, 0)))(s, times)
    return _null_if_empty(repeated, n)  # fewer than one time: null, as Druid's SQL-compatible mode


def _f_pad(left: bool) -> Callable[..., Any]:
    def one(s: Any, length: Any, chars: Any) -> Any:
        if int(length) == 0:
            return None
        return value_functions.pad(value_functions.java_text(s), int(length), value_functions.java_text(chars), left)
    return _per_value(one, pa.string())


def _f_contains(ignore_case: bool) -> Callable[..., Any]:
    def apply(n: int, s: Any, search: str) -> Any:
        s = _to_string(s)
        found = _lift(lambda x: pc.match_substring(x, str(search), ignore_case=ignore_case))(s)
        return False if found is None else (pc.fill_null(found, False) if is_arrow(found) else found)
    return apply


def _f_regexp_replace(n: int, s: Any, pattern: str, replacement: Any) -> Any:
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
    return _per_value(one, pa.string())(n, _to_string(s), replacement)


def _f_format(n: int, pattern: Any, *args: Any) -> Any:
    def one(p: Any, *values: Any) -> Any:
        return None if p is None else value_functions.java_format(value_functions.java_text(p), list(values))
    return _per_value(one, pa.string(), nulls=False)(n, pattern, *args)


# ------------------------------------------------------------------------------------ time


def _zone(name: Any) -> Any:
    return time_zone(str(name)) if name is not None else None


def _arrow_zone(zone: Any) -> str:
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
    if not is_text(_type_of(t)):
        return to_long(t)

    def one(x: str) -> int:
        number = to_long(x)
        if number is not None:
            return number
        try:
            return parse_iso(x)
        except ValueError:
            raise ExpressionError(f"{x[:40]!r} is not a time") from None
    return _per_value(one, pa.int64())(0 if not is_arrow(t) else len(t), t)


def _f_timestamp(n: int, s: Any, fmt: str | None = None, *, seconds: bool = False) -> Any:
    """Druid's timestamp(): text parsed as ISO-8601 (or by the Joda-Time pattern); anything else, or text that
    does not parse, is an error (Druid throws)."""
    if not (is_text(_type_of(s)) or pa.types.is_null(_type_of(s))):
        raise ExpressionError(f"first argument should be a STRING but got {_type_of(s)} instead")
    parse = timestamp_parser(str(fmt) if fmt is not None else "iso")

    def one(x: str) -> int:
        try:
            if fmt is None and re.match(r"\s*[-+]?\d+-\d\d-\d\d ", x):
                raise ValueError("Joda's dateOptionalTimeParser wants a 'T' before the time")
            millis = parse(x)
        except (ValueError, TypeError, OverflowError):
            raise ExpressionError(f"invalid value {x[:40]!r}") from None
        return int(millis / 1000) if seconds else millis  # Java's division truncates
    return _per_value(one, pa.int64())(n, s)


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


def _f_timestamp_floor(n: int, t: Any, period: str, origin: Any = None, zone: Any = None) -> Any:
    t = _millis_of_time_arg(t)
    tz = _arrow_zone(_zone(zone)) if zone is not None else "UTC"
    if origin is None and tz != "UTC" and is_arrow(t) and _modern(t):
        floored = _floor_in_zone(t, str(period), tz)
        if floored is not None:
            return floored
    if origin is None and tz == "UTC":
        gran = Granularity(str(period), Period.parse(str(period)))
        if not is_arrow(t):
            return None if t is None else buckets.floor(gran, pa.array([t], pa.timestamp("ms", tz="UTC"))
                                                        ).cast(pa.int64())[0].as_py()
        ts = pc.cast(_arr(t, n), pa.timestamp("ms", tz="UTC"))
        return pc.cast(pc.cast(buckets.floor(gran, ts), pa.timestamp("ms", tz="UTC")), pa.int64())
    return _per_value(_buckets(period, origin, zone).floor, pa.int64())(n, t)


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


def _f_timestamp_ceil(n: int, t: Any, period: str, origin: Any = None, zone: Any = None) -> Any:
    t = _millis_of_time_arg(t)
    buckets_ = _buckets(period, origin, zone)
    if origin is None and _arrow_zone(buckets_.zone) == "UTC" and is_arrow(t) and buckets_.single is not None:
        # vectorized: the bucket start, and when the time is past it the next bucket's start, found by flooring
        # a time surely inside the next bucket (a month is at most 31 days, a year 366)
        start = _f_timestamp_floor(n, t, period)
        field, count = buckets_.single
        ahead = {"years": 366 * 86_400_000, "months": 31 * 86_400_000}.get(field)
        following = _f_timestamp_floor(n, pc.add(start, count * ahead), period) if ahead else \
            pc.add(start, count * value_functions._FIXED_MS[field])
        return pc.if_else(pc.equal(start, t), t, following)
    return _per_value(buckets_.ceil, pa.int64())(n, t)


def _f_timestamp_shift(n: int, t: Any, period: str, step: Any, zone: Any = None) -> Any:
    shifts = _buckets(period, None, zone)
    t, steps = _millis_of_time_arg(t), _longs(step)[0]
    fields = dict(value_functions.PeriodBuckets._fields(shifts.period))
    sign = -1 if shifts.period.negative else 1
    fixed_offset = shifts.zone.utcoffset(None)  # None for a zone with rules (daylight saving)
    elapsed = not ({"years", "months"} & fields.keys()) and (
        fixed_offset is not None or not ({"weeks", "days"} & fields.keys()))
    if elapsed and (is_arrow(t) or is_arrow(steps)):  # no calendar field: a fixed number of milliseconds
        length = sign * sum(value_functions._FIXED_MS[f] * k for f, k in fields.items())
        return _lift(pc.add_checked)(t, _lift(pc.multiply_checked)(steps, length))
    if fixed_offset is not None and (is_arrow(t) or is_arrow(steps)):
        offset = int(fixed_offset.total_seconds() * 1000)

        def shift(millis: Any, k: Any) -> Any:  # in the zone's wall time, field by field as Joda adds them
            months = np.abs(np.asarray(k, dtype=np.float64)) * (fields.get("years", 0) * 12 + fields.get("months", 0))
            if np.any(months > 120_000):  # past 10,000 years: no date here holds it (numpy would wrap)
                raise ExpressionError("the shift leaves the range of dates")
            wall = millis + offset
            for field in ("years", "months"):
                if fields.get(field):
                    wall = _add_months(wall, k * sign * fields[field] * (12 if field == "years" else 1))
            rest = sum(value_functions._FIXED_MS[f] * c for f, c in fields.items() if f not in ("years", "months"))
            return wall + k * sign * rest - offset
        return _numpy(shift, [t, steps], n, pa.int64())
    return _per_value(lambda x, k: shifts.shift(x, int(k)), pa.int64())(n, t, steps)


def _add_months(millis: Any, months: Any) -> Any:
    """Epoch millis plus whole months on the calendar (the day clamped to the month's last), vectorized with
    Howard Hinnant's civil-date arithmetic."""
    days = np.floor_divide(millis, 86_400_000)
    time_of_day = millis - days * 86_400_000
    year, month, day = _civil_from_days(days)
    total = year * 12 + (month - 1) + months
    year = np.floor_divide(total, 12)
    month = total - year * 12 + 1
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    last = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[month] + ((month == 2) & leap)
    return _days_from_civil(year, month, np.minimum(day, last)) * 86_400_000 + time_of_day


def _civil_from_days(days: Any) -> tuple[Any, Any, Any]:
    z = days + 719_468
    era = np.floor_divide(z, 146_097)
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    return yoe + era * 400 + (month <= 2), month, day


def _days_from_civil(year: Any, month: Any, day: Any) -> Any:
    year = year - (month <= 2)
    era = np.floor_divide(year, 400)
    yoe = year - era * 400
    doy = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    return era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468


_TIME_UNITS = {"SECOND": pc.second, "MINUTE": pc.minute, "HOUR": pc.hour, "DAY": pc.day,
               "DOW": lambda t: pc.add(pc.day_of_week(t), 1), "ISODOW": lambda t: pc.add(pc.day_of_week(t), 1),
               "DOY": pc.day_of_year, "WEEK": pc.iso_week, "MONTH": pc.month, "QUARTER": pc.quarter,
               "YEAR": pc.year, "ISOYEAR": pc.iso_year, "MILLISECOND": pc.millisecond}


def _f_timestamp_extract(n: int, t: Any, unit: str, zone: Any = None) -> Any:
    u = str(unit).upper()
    millis = _millis_of_time_arg(t)
    if u in ("EPOCH", "MICROSECOND"):  # Druid's MICROSECOND is epoch seconds / 1000 (sic)
        seconds = _numpy(lambda m: _div_longs(m, np.int64(1000)), [millis], n, pa.int64())
        return seconds if u == "EPOCH" else _numpy(lambda m: _div_longs(m, np.int64(1000)), [seconds], n, pa.int64())
    tz = _arrow_zone(_zone(zone)) if zone is not None else "UTC"
    ts = pc.cast(pc.cast(_arr(millis, n), pa.timestamp("ms", tz="UTC")), pa.timestamp("ms", tz=tz))
    if u in _TIME_UNITS:
        out = pc.cast(_TIME_UNITS[u](ts), pa.int64())
    else:
        year = pc.cast(pc.year(ts), pa.float64())
        if u == "DECADE":
            out = pc.cast(pc.trunc(pc.divide(year, 10.0)), pa.int64())
        else:
            out = pc.ceil(pc.divide(year, 100.0 if u == "CENTURY" else 1000.0))  # a double, as Druid's
    return out if is_arrow(millis) else out[0].as_py()


def _f_timestamp_parse(n: int, s: Any, pattern: Any = None, zone: Any = None) -> Any:
    """Text to epoch millis: ISO-8601 or SQL ('2026-01-02 03:04:05') without a pattern; the zone for text
    without an offset; null for text that does not parse (Druid's timestamp_parse)."""
    tz = _zone(zone) or value_functions.EPOCH.tzinfo
    directive = joda_to_strptime(str(pattern)) if pattern is not None else None
    s = _to_string(s)
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
    return _per_value(one, pa.int64())(n, s)


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
    name = _arrow_zone(zone)
    if name == "UTC":
        return pc.cast(naive, pa.int64())
    if not _modern(pc.cast(naive, pa.int64())):
        return None
    try:  # a repeated wall time is the earlier instant, as Joda's; one in a gap goes to the per-value path
        aware = pc.assume_timezone(naive, name, ambiguous="earliest", nonexistent="raise")
    except pa.ArrowInvalid:
        return None
    return pc.cast(pc.cast(aware, pa.timestamp("ms", tz="UTC")), pa.int64())


def _f_timestamp_format(n: int, t: Any, pattern: Any = None, zone: Any = None) -> Any:
    tz = _zone(zone) or value_functions.EPOCH.tzinfo
    millis = to_long(t)
    tokens = _ISO_TOKENS if pattern is None else joda_tokens(str(pattern))
    if is_arrow(millis) and _modern(millis) and not any(letter == "z" for letter, _ in tokens):  # PST/PDT
        return _print_vectorized(tokens, millis, tz, iso=pattern is None)
    printer = value_functions.joda_printer(None if pattern is None else str(pattern), tz)
    return _per_value(printer, pa.string())(n, millis)


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
    ts = pc.cast(utc, pa.timestamp("ms", tz=_arrow_zone(zone)))
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


# ------------------------------------------------------------------------------------ addresses, other


def _f_ip_match(kind: str) -> Callable[..., Any]:
    def apply(n: int, address: Any, subnet: str) -> Any:
        matcher = (value_functions.ipv4_matcher if kind == "4" else value_functions.ipv6_matcher)(str(subnet))
        return _per_value(lambda v: int(matcher(v)), pa.int64(), nulls=False)(n, address)
    return apply


def _human_readable(system: str) -> Callable[..., Any]:
    def apply(n: int, value: Any, precision: int = 2) -> Any:
        return _per_value(lambda v: value_functions.human_readable(v, int(precision), system), pa.string())(
            n, _longs(_number_only(value))[0])
    return apply


IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    # general and conditional
    "cast": _f_cast,
    "coalesce": _f_coalesce,
    "if": _f_if,
    "nvl": _f_nvl,
    "case_searched": _f_case_searched,
    "case_simple": _f_case_simple,
    "isnull": _f_isnull,
    "notnull": _f_notnull,
    "like": _f_like,
    # text
    "concat": _f_concat,
    "format": _f_format,
    "parse_long": lambda n, s, radix=10: _per_value(value_functions.parse_long, pa.int64())(n, s, radix),
    "regexp_extract": _f_regexp_extract,
    "regexp_like": _f_regexp_like,
    "regexp_replace": _f_regexp_replace,
    "contains_string": _f_contains(ignore_case=False),
    "icontains_string": _f_contains(ignore_case=True),
    "replace": _f_replace,
    "substring": _f_substring,
    "right": _f_right,
    "left": _f_left,
    "strlen": _f_strlen,
    "strpos": lambda n, h, needle, start=0: _per_value(value_functions.strpos, pa.int64())(
        n, _to_string(h), _to_string(needle), 0 if start is None else _longs(start)[0]),
    "trim": _trim("trim"),
    "ltrim": _trim("ltrim"),
    "rtrim": _trim("rtrim"),
    "lower": lambda n, s: _lift(pc.utf8_lower)(_to_string(s)),
    "upper": lambda n, s: _lift(pc.utf8_upper)(_to_string(s)),
    "reverse": lambda n, s: _lift(pc.utf8_reverse)(_text_arg(s)),
    "repeat": _f_repeat,
    "lpad": _f_pad(left=True),
    "rpad": _f_pad(left=False),
    # time
    "timestamp": _f_timestamp,
    "unix_timestamp": lambda n, s, fmt=None: _f_timestamp(n, s, fmt, seconds=True),
    "timestamp_ceil": _f_timestamp_ceil,
    "timestamp_floor": _f_timestamp_floor,
    "timestamp_shift": _f_timestamp_shift,
    "timestamp_extract": _f_timestamp_extract,
    "timestamp_parse": _f_timestamp_parse,
    "timestamp_format": _f_timestamp_format,
    # math
    "abs": lambda n, x: _unary_math(pc.abs_checked, keep_longs=False)(n, *_math_args(x)),
    "acos": _double_math(np.arccos),
    "asin": _double_math(np.arcsin),
    "atan": _double_math(np.arctan),
    "atan2": _double_math(np.arctan2),
    "cbrt": _double_math(np.cbrt),
    "ceil": _double_math(np.ceil),
    "copysign": _double_math(np.copysign),
    "cos": _double_math(np.cos),
    "cosh": _double_math(np.cosh),
    "cot": _double_math(lambda x: np.cos(x) / np.sin(x)),
    "div": _typed_math(_div_longs, _div_doubles),
    "exp": _double_math(np.exp),
    "expm1": _double_math(np.expm1),
    "floor": _double_math(np.floor),
    "getexponent": lambda n, x: _numpy(_get_exponent, _doubles(x), n, pa.int64()),
    "hypot": _double_math(np.hypot),
    "log": _double_math(np.log),
    "log10": _double_math(np.log10),
    "log1p": _double_math(np.log1p),
    "max": _typed_math(np.maximum, np.maximum),
    "min": _typed_math(np.minimum, np.minimum),
    "nextafter": _double_math(np.nextafter),
    "nextup": _double_math(lambda x: np.nextafter(x, np.inf)),
    "pi": lambda n: math.pi,
    "pow": _double_math(_pow),
    "remainder": _double_math(lambda x, y: np.frompyfunc(_ieee_remainder, 2, 1)(x, y).astype(np.float64)),
    "rint": _double_math(np.rint),
    "round": _f_round,
    "safe_divide": _f_safe_divide,
    "scalb": lambda n, d, sf: _numpy(lambda a, b: np.ldexp(a, np.clip(b, -2**31, 2**31 - 1).astype(np.int32)),
                                     _scalb(d, sf), n, pa.float64()),
    "signum": _double_math(np.sign),
    "sin": _double_math(np.sin),
    "sinh": _double_math(np.sinh),
    "sqrt": _double_math(np.sqrt),
    "tan": _double_math(np.tan),
    "tanh": _double_math(np.tanh),
    "todegrees": _double_math(lambda x: x * 57.29577951308232),  # Java's Math.toDegrees constant
    "toradians": _double_math(lambda x: x * 0.017453292519943295),  # and Math.toRadians'
    "ulp": _double_math(_ulp),
    "bitwiseand": _long_math(np.bitwise_and),
    "bitwiseor": _long_math(np.bitwise_or),
    "bitwisexor": _long_math(np.bitwise_xor),
    "bitwiseshiftleft": _long_math(lambda x, y: np.left_shift(x, y & 63)),  # Java masks the shift to 6 bits
    "bitwiseshiftright": _long_math(lambda x, y: np.right_shift(x, y & 63)),
    "bitwisecomplement": _long_math(np.invert, checked=True),
    "bitwiseconvertdoubletolongbits": lambda n, x: _numpy(
        lambda d: np.where(np.isnan(d), np.int64(0x7FF8000000000000), np.asarray(d, np.float64).view(np.int64)),
        _doubles(x), n, pa.int64()),
    "bitwiseconvertlongbitstodouble": lambda n, x: _numpy(lambda v: np.asarray(v, np.int64).view(np.float64),
                                                          _longs(*_math_args(x), checked=True), n, pa.float64()),
    # addresses
    "ipv4_match": _f_ip_match("4"),
    "ipv4_parse": lambda n, a: _per_value(value_functions.ipv4_parse, pa.int64())(n, a),
    "ipv4_stringify": lambda n, a: _per_value(value_functions.ipv4_stringify, pa.string())(n, a),
    "ipv6_match": _f_ip_match("6"),
    # other
    "human_readable_binary_byte_format": _human_readable("binary"),
    "human_readable_decimal_byte_format": _human_readable("decimal_byte"),
    "human_readable_decimal_format": _human_readable("decimal"),
    "decode_base64_utf8": lambda n, s: _per_value(value_functions.decode_base64_utf8, pa.string())(n, _to_string(s)),
    "greatest": _extreme(pc.max_element_wise),
    "least": _extreme(pc.min_element_wise),
}

# arrays, lambdas, JSON: ingest_core.executor.array_functions and json_functions
IMPLEMENTATIONS.update(ARRAY_IMPLEMENTATIONS)
IMPLEMENTATIONS.update(JSON_IMPLEMENTATIONS)
# functions that take arrays and JSON values as they are; the others read them as scalars (`scalar_view`)
_AS_IS = frozenset(ARRAY_IMPLEMENTATIONS) | frozenset(JSON_IMPLEMENTATIONS) | {
    "nvl", "if", "case_searched", "coalesce", "case_simple", "cast"}


# ------------------------------------------------------------------------------------ the compiler


@dataclass(frozen=True)
class CompiledExpression:
    """A checked expression and its vectorized evaluator."""

    expression: Expression
    evaluate: Compiled

    @property
    def text(self) -> str:
        return self.expression.text

    @property
    def columns(self) -> frozenset[str]:
        return self.expression.columns

    def __call__(self, columns: Columns, num_rows: int) -> Any:
        try:
            return self.evaluate(columns, num_rows)
        except ExpressionError:
            raise
        except (TypeError, IndexError, ValueError, OverflowError, ZeroDivisionError, pa.ArrowException) as exc:
            # a value an operator cannot take: say which expression, never a raw pyarrow error
            raise ExpressionError(f"in expression {self.text!r}: {exc}") from None


def _compile(node: Node, text: str) -> Compiled:
    if isinstance(node, Literal):
        value = node.value
        return lambda cols, n: value
    if isinstance(node, Column):
        name = node.name
        return lambda cols, n: cols[name] if name in cols else pa.nulls(n)
    if isinstance(node, Unary):
        inner = _compile(node.operand, text)
        if node.op == "-":
            def negate(cols: Columns, n: int) -> Any:
                v = _numeric(scalar_view(inner(cols, n)))
                return _lift(pc.negate_checked if pa.types.is_integer(_type_of(v)) else pc.negate)(v)
            return negate
        return lambda cols, n: _as_long(_lift(pc.invert)(_as_bool(scalar_view(inner(cols, n)), n)))
    if isinstance(node, Binary):
        left, right = _compile(node.left, text), _compile(node.right, text)
        if node.op in ("&&", "||"):
            op = _logic(node.op)
        elif node.op in ("<", "<=", ">", ">=", "==", "!="):
            cmp = _compare(node.op)
            op = lambda a, b: _as_long(cmp(a, b))  # noqa: E731 - comparisons yield 1 or 0
        else:
            op = _arith(node.op)
        return lambda cols, n: op(scalar_view(left(cols, n)), scalar_view(right(cols, n)))
    if isinstance(node, ArrayLiteral):
        return compile_array_literal(node)
    if isinstance(node, Lambda):
        raise ExpressionError(f"in expression {text!r}: a lambda is only an apply function's first argument")
    assert isinstance(node, Call)
    if node.name in APPLY_COMPILERS:
        return APPLY_COMPILERS[node.name](node, text, _compile)
    fn = IMPLEMENTATIONS[node.name]
    name = node.name
    args = compile_arguments(node, text, _compile)
    constant = [a.value if isinstance(a, Literal) else None for a in node.args]
    is_constant = [isinstance(a, Literal) for a in node.args]
    view = (lambda v: v) if name in _AS_IS else scalar_view

    def apply(cols: Columns, n: int) -> Any:
        values = [c if k else view(a(cols, n)) for a, c, k in zip(args, constant, is_constant)]
        try:
            return fn(n, *values)
        except ExpressionError as exc:
            raise ExpressionError(f"in expression {text!r}: {name}(): {exc}") from None
        except (TypeError, IndexError, ValueError, OverflowError, ZeroDivisionError, pa.ArrowException) as exc:
            # a value the function cannot take: say which call
            raise ExpressionError(f"in expression {text!r}: {name}(): {exc}") from None
    return apply


def compile_expression(source: str | Expression) -> CompiledExpression:
    """Compile an expression (its text, checked first, or an already checked tree)."""
    expression = parse_expression(source) if isinstance(source, str) else source
    return CompiledExpression(expression, with_implicit_apply(expression.root,
                                                              _compile(expression.root, expression.text)))


def evaluate_to_array(expr: CompiledExpression, columns: Columns, num_rows: int) -> pa.Array:
    """Evaluate and always return an array of `num_rows` (constants are broadcast, booleans become 1/0)."""
    value = _as_long(expr(columns, num_rows))
    arr = _arr(value, num_rows)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr
