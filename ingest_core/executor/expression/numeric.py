"""Druid's math functions on the executors, on numpy over whole columns, typed as Function.java types them: the
Double(Uni|Bi)variateMathFunctions give doubles, two longs give a long where Druid keeps longs (max, min, div),
bitwise functions cast doubles as Java's (long) does; round is BigDecimal's HALF_UP on the shortest decimal
form; safe_divide gives null for a zero divisor; and the human-readable size formats.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_core.core.expression.errors import ExpressionError
from ingest_core.executor import value_functions
from ingest_core.executor.casts import is_arrow, to_double
from ingest_core.executor.expression.vectors import (
    both_longs,
    broadcast,
    doubles,
    java_long,
    lift,
    longs,
    math_args,
    number_only,
    numeric,
    on_numpy,
    per_value,
    value_type,
)


def _unary_math(fn: Callable[..., Any], keep_longs: bool) -> Callable[..., Any]:
    def apply(n: int, x: Any) -> Any:
        x = numeric(x)
        if keep_longs and pa.types.is_integer(value_type(x)):
            return x
        return lift(fn)(x)
    return apply


def _double_math(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Druid's Double(Uni|Bi)variateMathFunction: the arguments as doubles (text as `math_args` says), a double
    out."""
    return lambda n, *args: on_numpy(fn, doubles(*args), n, pa.float64())


def _long_math(fn: Callable[..., Any], checked: bool = False) -> Callable[..., Any]:
    return lambda n, *args: on_numpy(fn, longs(*math_args(*args), checked=checked), n, pa.int64())


def _typed_math(long_fn: Callable[..., Any], double_fn: Callable[..., Any]) -> Callable[..., Any]:
    """Druid's BivariateMathFunction: two longs give a long, anything else doubles."""
    def apply(n: int, x: Any, y: Any) -> Any:
        x, y = math_args(x, y)
        if both_longs(x, y):
            return on_numpy(long_fn, [x, y], n, pa.int64())
        return on_numpy(double_fn, doubles(x, y), n, pa.float64() if double_fn is not _div_doubles else pa.int64())
    return apply


def _scalb(d: Any, sf: Any) -> list[Any]:
    d, sf = math_args(d, sf)
    return [to_double(d), longs(sf)[0]]


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


def div_longs(x: Any, y: Any) -> Any:
    if np.any(y == 0):
        raise ExpressionError("long division by zero")
    q = np.abs(x) // np.abs(np.where(y == 0, 1, y))
    return np.where((x < 0) != (y < 0), -q, q)  # toward zero, as Java


def _div_doubles(x: Any, y: Any) -> Any:
    return java_long(np.asarray(x, dtype=np.float64) / y)


def safe_divide(n: int, x: Any, y: Any) -> Any:
    """x / y, or null when y is 0; for doubles 0 / 0 (or NaN) is 0, as Druid's SafeDivide."""
    x, y = math_args(x, y)
    if both_longs(x, y):
        def longs(a: Any, b: Any) -> Any:
            return div_longs(a, np.where(b == 0, 1, b))
        quotient = on_numpy(longs, [x, y], n, pa.int64())
        kind, zero = pa.int64(), 0
    else:
        x, y = doubles(x, y)
        quotient = on_numpy(lambda a, b: a / np.where(b == 0, 1, b), [x, y], n, pa.float64())
        kind, zero = pa.float64(), 0.0
    undefined = lift(pc.or_)(lift(pc.equal)(y, 0), lift(pc.is_nan)(y) if kind == pa.float64() else False)
    if not is_arrow(undefined) and not is_arrow(quotient) and not is_arrow(x):
        if undefined is None or quotient is None:
            return None
        return quotient if not undefined else (zero if x == 0 and kind == pa.float64() else None)
    undefined = pc.fill_null(broadcast(undefined, n), False)
    x_zero = pc.fill_null(broadcast(lift(pc.equal)(x, 0), n), False) if kind == pa.float64() else pa.repeat(False, n)
    return pc.if_else(undefined, pc.if_else(x_zero, pa.scalar(zero, kind), pa.scalar(None, kind)),
                      broadcast(quotient, n))


def round_(n: int, x: Any, scale: int = 0) -> Any:
    """BigDecimal's HALF_UP on the value's shortest decimal form (halves away from zero); a long stays a long,
    NaN is 0 and infinities the largest finite doubles, as Druid's round."""
    x, digits = number_only(x), int(scale)
    if pa.types.is_integer(value_type(x)):
        if digits >= 0:
            return x
        return lift(lambda v: pc.round(v, digits, round_mode="half_towards_infinity"))(x)
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


def _human_readable(system: str) -> Callable[..., Any]:
    def apply(n: int, value: Any, precision: int = 2) -> Any:
        return per_value(lambda v: value_functions.human_readable(v, int(precision), system), pa.string())(
            n, longs(number_only(value))[0])
    return apply


# the registry's implementations (core.expression.functions names them "numeric.<name>")
acos = _double_math(np.arccos)
asin = _double_math(np.arcsin)
atan = _double_math(np.arctan)
atan2 = _double_math(np.arctan2)
cbrt = _double_math(np.cbrt)
ceil = _double_math(np.ceil)
copysign = _double_math(np.copysign)
cos = _double_math(np.cos)
cosh = _double_math(np.cosh)
cot = _double_math(lambda x: np.cos(x) / np.sin(x))
div = _typed_math(div_longs, _div_doubles)
exp = _double_math(np.exp)
expm1 = _double_math(np.expm1)
floor = _double_math(np.floor)
hypot = _double_math(np.hypot)
log = _double_math(np.log)
log10 = _double_math(np.log10)
log1p = _double_math(np.log1p)
max_ = _typed_math(np.maximum, np.maximum)
min_ = _typed_math(np.minimum, np.minimum)
nextafter = _double_math(np.nextafter)
nextup = _double_math(lambda x: np.nextafter(x, np.inf))
pow_ = _double_math(_pow)
remainder = _double_math(lambda x, y: np.frompyfunc(_ieee_remainder, 2, 1)(x, y).astype(np.float64))
rint = _double_math(np.rint)
signum = _double_math(np.sign)
sin = _double_math(np.sin)
sinh = _double_math(np.sinh)
sqrt = _double_math(np.sqrt)
tan = _double_math(np.tan)
tanh = _double_math(np.tanh)
todegrees = _double_math(lambda x: x * 57.29577951308232)  # Java's Math.toDegrees constant
toradians = _double_math(lambda x: x * 0.017453292519943295)  # and Math.toRadians'
ulp = _double_math(_ulp)
bitwiseand = _long_math(np.bitwise_and)
bitwiseor = _long_math(np.bitwise_or)
bitwisexor = _long_math(np.bitwise_xor)
bitwiseshiftleft = _long_math(lambda x, y: np.left_shift(x, y & 63))  # Java masks the shift to 6 bits
bitwiseshiftright = _long_math(lambda x, y: np.right_shift(x, y & 63))
bitwisecomplement = _long_math(np.invert, checked=True)
human_readable_binary_byte_format = _human_readable("binary")
human_readable_decimal_byte_format = _human_readable("decimal_byte")
human_readable_decimal_format = _human_readable("decimal")


def abs_(n: int, x: Any) -> Any:
    return _unary_math(pc.abs_checked, keep_longs=False)(n, *math_args(x))


def getexponent(n: int, x: Any) -> Any:
    return on_numpy(_get_exponent, doubles(x), n, pa.int64())


def pi(n: int) -> Any:
    return math.pi


def scalb(n: int, d: Any, sf: Any) -> Any:
    return on_numpy(lambda a, b: np.ldexp(a, np.clip(b, -2**31, 2**31 - 1).astype(np.int32)), _scalb(d, sf), n,
                    pa.float64())


def bitwiseconvertdoubletolongbits(n: int, x: Any) -> Any:
    return on_numpy(lambda d: np.where(np.isnan(d), np.int64(0x7FF8000000000000),
                                       np.asarray(d, np.float64).view(np.int64)), doubles(x), n, pa.int64())


def bitwiseconvertlongbitstodouble(n: int, x: Any) -> Any:
    return on_numpy(lambda v: np.asarray(v, np.int64).view(np.float64), longs(*math_args(x), checked=True), n,
                    pa.float64())
