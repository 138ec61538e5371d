"""Druid expressions on the executors: the checked tree of `ingest_core.core.expressions` compiled to vectorized
pyarrow compute functions over a chunk's columns.

A compiled expression maps (columns, row count) to a pyarrow array or a Python scalar (a constant). Druid's
rules: numeric operators and functions read text as a number (null when it is not one); `+` with text
concatenates; long arithmetic that leaves the long range, long division by zero and a cast that cannot hold
the value are errors (`ExpressionError`), which the row parser turns into that row's parse exception. Doubles
follow IEEE (x / 0.0 is infinite); `safe_divide` gives null instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

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
    like_to_regex,
    parse_expression,
)
from ingest_core.executor import buckets
from ingest_core.executor.array_functions import (
    APPLY_COMPILERS,
    ARRAY_IMPLEMENTATIONS,
    cast_to_array,
    compile_arguments,
    compile_array_literal,
    with_implicit_apply,
)
from ingest_core.executor.expr_values import scalar_view
from ingest_core.executor.json_functions import JSON_IMPLEMENTATIONS

Columns = Mapping[str, pa.Array]
Compiled = Callable[[Columns, int], Any]  # (columns, row count) -> pa.Array or a Python scalar


LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1


# ------------------------------------------------------------------------------------ value helpers


def _arr(v: Any, n: int) -> pa.Array:
    if isinstance(v, (pa.Array, pa.ChunkedArray)):
        return v
    return pa.array([v] * n) if v is not None else pa.nulls(n)


def _is_arrow(v: Any) -> bool:
    return isinstance(v, (pa.Array, pa.ChunkedArray))


def _lift(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Apply a pyarrow compute function to arrays or Python scalars."""
    def call(*args: Any) -> Any:
        if not any(_is_arrow(a) for a in args):
            if any(a is None for a in args):
                return None
            return fn(*[pa.scalar(a) for a in args]).as_py()
        return fn(*[a if _is_arrow(a) else (pa.scalar(a) if a is not None else pa.scalar(None, pa.null())) for a in args])
    return call


def _type_of(v: Any) -> pa.DataType:
    if _is_arrow(v):
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


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _as_bool(v: Any, n: int) -> Any:
    t = _type_of(v)
    if pa.types.is_boolean(t):
        return v
    if _is_number(t):
        return _lift(pc.greater)(v, 0)
    if _is_text(t):
        return _lift(pc.equal)(_lift(pc.utf8_lower)(v), "true")
    if pa.types.is_null(t):
        return v
    raise ExpressionError(f"cannot use a value of type {t} as a condition")


def _as_long(v: Any) -> Any:
    t = _type_of(v)
    if pa.types.is_boolean(t):
        return int(v) if not _is_arrow(v) else pc.cast(v, pa.int64())
    return v


def _numeric(v: Any) -> Any:
    """A value for a numeric operator: text read as a number (null when it is not one), as Druid does."""
    v = _as_long(v)
    return to_double(v) if _is_text(_type_of(v)) else v


def to_long(v: Any) -> Any:
    """Druid's cast to LONG: text is read as a number (null when it is not one; whole numbers exactly),
    fractions truncate toward zero; a value past the long range (or NaN, infinite) is an error, never a
    wrapped number."""
    if not _is_arrow(v):
        if v is None or isinstance(v, bool):
            return None if v is None else int(v)
        if isinstance(v, str):
            text = v.strip()
            number = int(text) if re.fullmatch(_WHOLE_TEXT, text) else to_double(text)
        else:
            number = v
        if number is None:
            return None
        if isinstance(number, float) and not math.isfinite(number):
            raise ExpressionError(f"cannot cast {v!r} to LONG")
        out = int(number)
        if not LONG_MIN <= out <= LONG_MAX:
            raise ExpressionError(f"{v!r} is outside the LONG range")
        return out
    try:
        if _is_text(v.type):
            whole = pc.match_substring_regex(v, _WHOLE_TEXT)
            exact = pc.cast(pc.if_else(whole, pc.utf8_trim_whitespace(v), pa.scalar(None, pa.string())), pa.int64())
            return pc.coalesce(exact, to_long(to_double(pc.if_else(whole, pa.scalar(None, pa.string()), v))))
        if pa.types.is_floating(v.type):
            return pc.cast(pc.trunc(v), pa.int64())  # a safe cast: NaN, infinities and overflow raise
        return pc.cast(v, pa.int64())
    except pa.ArrowInvalid as exc:
        raise ExpressionError(f"cannot cast to LONG: {exc}") from None


_WHOLE_TEXT = r"^\s*[-+]?\d+\s*$"
_NUMBER_TEXT = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


def to_double(v: Any) -> Any:
    """Druid's cast to DOUBLE: text that is a decimal number is read, anything else (including 'NaN') is null."""
    if not _is_arrow(v):
        if v is None:
            return None
        if isinstance(v, str):
            return float(v) if re.match(_NUMBER_TEXT, v) else None
        return float(v)
    if _is_text(v.type):
        ok = pc.match_substring_regex(v, _NUMBER_TEXT)
        cleaned = pc.if_else(ok, pc.utf8_trim_whitespace(v), pa.scalar(None, pa.string()))
        return pc.cast(cleaned, pa.float64())
    return pc.cast(v, pa.float64())


def _to_string(v: Any) -> Any:
    if not _is_arrow(v):
        return None if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
    return v if pa.types.is_string(v.type) else pc.cast(v, pa.string())


_CHECKED = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}


def _arith(name: str) -> Callable[[Any, Any], Any]:
    def op(a: Any, b: Any) -> Any:
        a, b = _as_long(a), _as_long(b)
        if name == "+" and (_is_text(_type_of(a)) or _is_text(_type_of(b))):
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
    if (b == 0) if not _is_arrow(b) else (pc.any(pc.equal(b, 0)).as_py() or False):
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


def _f_substring(n: int, s: Any, index: int, length: int | None = None) -> Any:
    start = int(index)
    stop = None if length is None or int(length) < 0 else start + int(length)
    return _lift(lambda x: pc.utf8_slice_codeunits(x, start, stop if stop is not None else 2**31 - 1))(_to_string(s))


def _f_replace(n: int, s: Any, pattern: str, replacement: str) -> Any:
    return _lift(lambda x: pc.replace_substring(x, str(pattern), str(replacement)))(_to_string(s))


def _f_nvl(n: int, a: Any, b: Any) -> Any:
    if not _is_arrow(a) and not _is_arrow(b):
        return b if a is None else a
    a, b = _unify(a, b, n)
    return pc.coalesce(a, b)


def _f_if(n: int, cond: Any, a: Any, b: Any) -> Any:
    c = _as_bool(cond, n)
    if not _is_arrow(c) and not _is_arrow(a) and not _is_arrow(b):
        return a if c else b
    a, b = _unify(a, b, n)
    return pc.if_else(pc.fill_null(_arr(c, n), False), a, b)


def _unify(a: Any, b: Any, n: int) -> tuple[pa.Array, pa.Array]:
    """Two values as arrays of one type: text if either is text, else double if they differ."""
    ta, tb = _type_of(a), _type_of(b)
    if ta != tb and not pa.types.is_null(ta) and not pa.types.is_null(tb):
        if _is_text(ta) or _is_text(tb):
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


def _f_timestamp_floor(n: int, t: Any, period: str) -> Any:
    from ingest_core.core.granularity import Granularity
    from ingest_core.core.periods import Period

    gran = Granularity(str(period), Period.parse(str(period)))
    ts = pc.cast(_arr(to_long(t), n), pa.timestamp("ms", tz="UTC"))
    return pc.cast(pc.cast(buckets.floor(gran, ts), pa.timestamp("ms", tz="UTC")), pa.int64())


def _f_timestamp(n: int, s: Any, fmt: str | None = None) -> Any:
    from ingest_core.executor.timestamps import timestamp_parser

    parse = timestamp_parser(str(fmt) if fmt is not None else "auto")

    def one(x: Any) -> int | None:
        try:
            return None if x is None else parse(x)
        except (ValueError, TypeError, OverflowError):
            return None
    if not _is_arrow(s):
        return one(s)
    return pa.array([one(x) for x in s.to_pylist()], pa.int64())


_TIME_UNITS = {"SECOND": pc.second, "MINUTE": pc.minute, "HOUR": pc.hour, "DAY": pc.day,
               "DOW": lambda t: pc.add(pc.day_of_week(t), 1), "DOY": pc.day_of_year, "WEEK": pc.iso_week,
               "MONTH": pc.month, "QUARTER": pc.quarter, "YEAR": pc.year}


def _f_timestamp_extract(n: int, t: Any, unit: str) -> Any:
    u = str(unit).upper()
    millis = to_long(t)
    if u == "EPOCH":
        return _lift(pc.divide)(millis, 1000)
    ts = pc.cast(_arr(millis, n), pa.timestamp("ms", tz="UTC"))
    return pc.cast(_TIME_UNITS[u](ts), pa.int64())


def _f_regexp_extract(n: int, s: Any, pattern: str, index: int = 0) -> Any:
    rx = re.compile(str(pattern))  # the core checked it and its group
    group = int(index)

    def one(x: str | None) -> str | None:
        if x is None:
            return None
        m = rx.search(x)
        return m.group(group) if m else None
    s = _to_string(s)
    if not _is_arrow(s):
        return one(s)
    return pa.array([one(x) for x in s.to_pylist()], pa.string())


def _f_like(n: int, s: Any, pattern: str, escape: str | None = None) -> Any:
    rx = like_to_regex(str(pattern), None if escape is None else str(escape))
    return _lift(lambda x: pc.match_substring_regex(x, rx))(_to_string(s))


def _f_regexp_like(n: int, s: Any, pattern: str) -> Any:
    return _lift(lambda x: pc.match_substring_regex(x, str(pattern)))(_to_string(s))


def _f_round(n: int, x: Any, scale: int = 0) -> Any:
    x = _numeric(x)
    if pa.types.is_integer(_type_of(x)) and int(scale) >= 0:
        return x
    # Druid rounds with BigDecimal's HALF_UP: halves away from zero
    return _lift(lambda v: pc.round(v, int(scale), round_mode="half_towards_infinity"))(to_double(x))


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
        types = [_type_of(a) for a in args]
        if any(_is_text(t) for t in types):
            args = tuple(_to_string(a) for a in args)
        elif any(pa.types.is_floating(t) for t in types):
            args = tuple(to_double(a) for a in args)
        return _lift(fn)(*args)
    return apply


def _f_safe_divide(n: int, x: Any, y: Any) -> Any:
    x, y = _numeric(x), _numeric(y)
    zero = _lift(pc.equal)(y, 0)
    if not _is_arrow(zero):
        return None if zero in (None, True) else _arith("/")(x, y)
    quotient = _arith("/")(x, pc.if_else(zero, pa.scalar(1, _type_of(y)), y))  # no zero left to divide by
    kind = _type_of(quotient)
    return pc.if_else(zero, pa.scalar(None, kind if not pa.types.is_null(kind) else pa.float64()), quotient)


def _f_isnull(n: int, x: Any) -> Any:
    return (x is None) if not _is_arrow(x) else pc.is_null(x)


def _f_notnull(n: int, x: Any) -> Any:
    return (x is not None) if not _is_arrow(x) else pc.is_valid(x)


IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "concat": _f_concat,
    "upper": lambda n, s: _lift(pc.utf8_upper)(_to_string(s)),
    "lower": lambda n, s: _lift(pc.utf8_lower)(_to_string(s)),
    "strlen": lambda n, s: _lift(lambda x: pc.cast(pc.utf8_length(x), pa.int64()))(_to_string(s)),
    "trim": lambda n, s: _lift(pc.utf8_trim_whitespace)(_to_string(s)),
    "ltrim": lambda n, s: _lift(pc.utf8_ltrim_whitespace)(_to_string(s)),
    "rtrim": lambda n, s: _lift(pc.utf8_rtrim_whitespace)(_to_string(s)),
    "substring": _f_substring,
    "replace": _f_replace,
    "nvl": _f_nvl,
    "if": _f_if,
    "case_searched": _f_case_searched,
    "cast": _f_cast,
    "abs": _unary_math(pc.abs_checked, keep_longs=False),
    "floor": _unary_math(pc.floor, keep_longs=True),
    "ceil": _unary_math(pc.ceil, keep_longs=True),
    "round": _f_round,
    "safe_divide": _f_safe_divide,
    "greatest": _extreme(pc.max_element_wise),
    "least": _extreme(pc.min_element_wise),
    "isnull": _f_isnull,
    "notnull": _f_notnull,
    "like": _f_like,
    "regexp_like": _f_regexp_like,
    "regexp_extract": _f_regexp_extract,
    "timestamp": _f_timestamp,
    "timestamp_floor": _f_timestamp_floor,
    "timestamp_extract": _f_timestamp_extract,
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
